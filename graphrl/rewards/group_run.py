"""The graph's group reward as the runner's hook: the rollouts of one prompt -> the same rollouts,
rewards replaced and re-credited to their samples.

Input: a `Plan` whose reward has `group:`, the data rows (a rollout's `group` is its row index),
the search path for user functions. Output: `group_reward_hook(...)`, a function
list[RolloutResult] -> list[RolloutResult] for `run_dataset(group_reward=...)`, or None when the
plan has no group reward.

- `preference` (built-in): correct = the rollout's own reward (its `reward.key` value when a dict)
  >= 0.5; features from its calls (usage: cost, latency, ...; the reward judge's calls excluded) and
  final state (`group.oriented_features`).
  Each rollout's reward becomes {score, correct, preference, dropped, rule}: `score` is what is
  credited (`reward.credit`: even / broadcast) and trained; `rule` is the reward before the group step.
- `module:function`: called as fn(rewards: list, **args) with the rollouts' own rewards (float, dict,
  or None for a failed rollout); it returns one float per rollout, credited the same way.
The arguments are rendered once per group with `row`, `prompt`, `label` and `metadata` of its row.
A failing group reward never stops the run: the group keeps its rewards and each rollout's `error`
says why.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..plan import Plan
from ..runtime.executor import RolloutResult, usage
from ..runtime.runner import regroup_credit
from ..runtime.scope import Renderer
from ..spec.imports import ImportProblem, resolve_callable
from .group import oriented_features, preference

Hook = Callable[[list[RolloutResult]], list[RolloutResult]]
JUDGE_NODE = "reward"  # the node name the executor records reward-judge calls under


def group_reward_hook(
    plan: Plan, rows: Sequence[Mapping[str, Any]] | Mapping[Any, Mapping[str, Any]], search: list[Path] | None = None
) -> Hook | None:
    """`rows`: the data rows by group (a list indexed by row, or a mapping from group id to row)."""
    if plan.reward is None or plan.reward.group is None:
        return None
    spec = plan.reward.group
    renderer = Renderer(plan)
    credit, key, discount = plan.reward.credit, plan.reward.key, plan.reward.discount

    def hook(results: list[RolloutResult]) -> list[RolloutResult]:
        if not results:
            return results
        row = dict(rows[results[0].group])
        ctx = {
            "row": row,
            "prompt": row.get("prompt"),
            "label": row.get("label"),
            "metadata": row.get("metadata") or {},
        }
        try:
            args = renderer.value(("reward", "group", "args"), spec.args, ctx)
            if spec.fn == "preference":
                return _preference(results, args, credit, key, discount)
            return _user(spec.fn, results, args, credit, search, discount)
        except Exception as exc:
            note = f"group reward '{spec.fn}': {type(exc).__name__}: {exc}"
            return [dataclasses.replace(r, error=f"{r.error}; {note}" if r.error else note) for r in results]

    return hook


def scalar(reward: Any, key: str | None) -> float:
    """A rollout's own reward as a number (0.0 for none, the `key` value or first number of a dict)."""
    if reward is None:
        return 0.0
    if isinstance(reward, Mapping):
        if key is not None and key in reward:
            return float(reward[key])
        return next((float(v) for v in reward.values() if isinstance(v, (int, float))), 0.0)
    return float(reward)


def _preference(
    results: list[RolloutResult], args: Mapping[str, Any], credit: str, key: str | None, discount: float = 1.0
) -> list[RolloutResult]:
    rule = [scalar(r.reward, key) for r in results]
    correct = [v >= 0.5 for v in rule]
    # the judge's calls (node "reward") are the grader's cost, not the rollout's: left out of the features
    feats = [
        oriented_features(usage([c for c in r.calls if c.node != JUDGE_NODE]), r.state, args.get("features"))
        for r in results
    ]
    scores = preference(
        correct,
        feats,
        weights=args.get("weights"),
        clip=float(args.get("clip", 3.0)),
        min_std=float(args.get("min_std", 0.1)),
    )
    credited = regroup_credit(results, scores.rewards, credit, discount)
    return [
        dataclasses.replace(
            res,
            reward={
                "score": score,
                "correct": float(ok),
                "preference": pref,
                "dropped": scores.dropped,
                "rule": before,
            },
        )
        for res, score, ok, pref, before in zip(
            credited, scores.rewards, correct, scores.preference, [r.reward for r in results]
        )
    ]


def _user(
    ref: str,
    results: list[RolloutResult],
    args: Mapping[str, Any],
    credit: str,
    search: list[Path] | None,
    discount: float = 1.0,
) -> list[RolloutResult]:
    fn = resolve_callable(ref, list(search or []))
    if isinstance(fn, ImportProblem):
        raise ValueError(fn.message)
    if inspect.iscoroutinefunction(fn):
        raise ValueError("a group reward must be a plain function (it runs once per group, after the rollouts)")
    values = list(fn([r.reward for r in results], **args))
    if len(values) != len(results):
        raise ValueError(f"returned {len(values)} rewards for {len(results)} rollouts")
    return regroup_credit(results, [float(v) for v in values], credit, discount)
