"""Scoring: a rollout's reward and a visit's own node reward, from the plan's reward specs.

Input: the plan, the template renderer, the `RewardScorer`, the scope to render arguments in, the
judge callback (rollout rewards only) and the rollout's live environment (or None). Output: the
reward value; a composite reward (`terms:`) gives {score, <term>: value, ...}; a node reward gives
one float (a dict's `key`, default `score`).

Invariants: node rewards never ask a judge; a node reward that raises becomes a `RolloutFault`
located at the node (the rollout fails, nothing else); template errors stay `RenderError`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..plan import Plan
from ..spec.common import NodeReward
from .environment import LiveEnvironment
from .outcome import reward_scalar
from .rollout import RolloutFault
from .scope import NodeResult, Renderer, RenderError
from .services import JudgeFn, RewardScorer


async def node_reward(
    plan: Plan,
    render: Renderer,
    rewards: RewardScorer,
    nid: str,
    spec: NodeReward,
    ctx: dict[str, Any],
    output: NodeResult,
    live: LiveEnvironment | None,
) -> float:
    scope = {**ctx, "output": output, nid: output}
    path = ("nodes", nid, "reward", "args")
    try:
        value = await rewards.score(
            spec.fn, render.value(path, spec.args, scope), judge_model=None, judge=_no_judge, env=live
        )
        return float(reward_scalar(value, spec.key or "score")) if isinstance(value, Mapping) else float(value)
    except RenderError:
        raise
    except Exception as exc:  # user reward code may raise anything: it fails this rollout only
        where = plan.span("nodes", nid, "reward")
        raise RolloutFault(f"{where}: reward of '{nid}': {type(exc).__name__}: {exc}") from exc


async def _no_judge(model: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
    raise AssertionError("node rewards are scored without a judge")


async def rollout_reward(
    plan: Plan,
    render: Renderer,
    rewards: RewardScorer,
    ctx: dict[str, Any],
    judge: JudgeFn,
    live: LiveEnvironment | None,
) -> float | dict[str, Any] | None:
    """The reward's value; a composite reward (`terms:`) gives {score, <term>: value, ...}."""
    spec = plan.reward
    assert spec is not None
    values = {}
    for path, fn, args in spec.items():
        value = await rewards.score(fn, render.value(path, args, ctx), judge_model=spec.judge, judge=judge, env=live)
        if spec.terms is None:
            return value
        if value is None:
            raise TypeError(f"term '{path[2]}' ({fn}) returned None (a float or a dict with 'score' is expected)")
        values[path[2]] = float(value["score"]) if isinstance(value, Mapping) else float(value)
    assert spec.terms is not None
    weighted = [spec.terms[name].weight * v for name, v in values.items()]
    score = max(weighted) if spec.combine == "max" else sum(weighted)
    return {"score": score, **values}
