"""A finished rollout's samples and usage: builders frozen, credit assigned, statuses settled.

Input: the rollout's samples (frozen or still building), its reward and reward spec, its status and
id; or its call records. Output: the training samples in creation order, each with its index,
rollout id, status and credited reward; the usage summary rewards read as `usage`.

Invariants: a thread sample with no response yet is dropped (nothing to train on); a failed or
aborted rollout marks every sample so; credit splits exactly the scalar reward (ledger.assign_credit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..spec.model import Reward
from .ledger import CallRecord, LedgerError, SampleBuilder, TrainingSample, assign_credit
from .outcome import reward_scalar


def finish_samples(
    samples: Sequence[TrainingSample | SampleBuilder],
    reward: Any,
    spec: Reward | None,
    status: str,
    rollout_id: int | str,
    node_rewards: Mapping[tuple[str, int], float] | None = None,
) -> tuple[TrainingSample, ...]:
    """Samples holding a visit with its own reward (a node `reward:`; the last such visit in the
    sample) train on it as `reward.node_rewards` says (own, times or plus the rollout's reward); the
    rest share the rollout's reward by `reward.credit`, among themselves."""
    frozen: list[TrainingSample] = []
    for s in samples:
        if isinstance(s, SampleBuilder):
            try:
                s = s.freeze()
            except LedgerError:
                continue  # a thread sample with no response yet: nothing to train on
        frozen.append(s)
    scored = [_own_reward(s, node_rewards) for s in frozen]  # (role, value) or None
    own = [None if x is None else x[1] for x in scored]
    plain = [i for i, o in enumerate(own) if o is None]
    credits: list[Any] = [None] * len(frozen)
    if reward is not None and plain and spec is not None:
        shares = assign_credit(reward_scalar(reward, spec.key), len(plain), spec.credit, spec.discount)
        for i, share in zip(plain, shares):
            credits[i] = share
    mode = spec.node_rewards if spec is not None else "own"
    base = _scalar(reward, spec) if mode != "own" else None
    failed = status in ("aborted", "failed")  # no reward for the rollout: none for its node rewards either
    for i, value in enumerate(own):
        if value is not None and not failed:
            credits[i] = value if base is None else (value * base if mode == "times" else value + base)
    out = []
    for i, (s, credit) in enumerate(zip(frozen, credits)):
        st = status if status in ("aborted", "failed") else s.status
        meta = s.metadata
        hit = scored[i]
        if hit is not None:  # targets normalise these per node (role), not as shares of the rollout
            meta = {**meta, "own_reward": hit[1], "role": hit[0]}
        out.append(dataclasses.replace(s, index=i, rollout_id=rollout_id, status=st, reward=credit, metadata=meta))
    return tuple(out)


def _own_reward(
    sample: TrainingSample, node_rewards: Mapping[tuple[str, int], float] | None
) -> tuple[str, float] | None:
    """(node, reward) of the sample's last generated visit that has its own reward, else None."""
    if not node_rewards:
        return None
    for span in reversed(sample.spans):
        if span.kind == "generated" and (span.node, span.visit) in node_rewards:
            return span.node, node_rewards[(span.node, span.visit)]
    return None


def _scalar(reward: Any, spec: Reward | None) -> float | None:
    """The rollout reward as one number for node_rewards: times / plus (None when there is none)."""
    if reward is None or spec is None:
        return None
    value = reward_scalar(reward, spec.key or ("score" if isinstance(reward, Mapping) and "score" in reward else None))
    return float(value) if not isinstance(value, Mapping) else None


def usage(calls: list[CallRecord]) -> dict[str, Any]:
    """What a rollout used, for rewards: cost, latency, tokens, and calls per node and per endpoint."""
    by_node: dict[str, int] = {}
    by_endpoint: dict[str, dict[str, float]] = {}
    for c in calls:
        by_node[c.node] = by_node.get(c.node, 0) + 1
        e = by_endpoint.setdefault(c.endpoint, {"calls": 0, "cost": 0.0, "latency_s": 0.0, "tokens": 0})
        e["calls"] += 1
        e["cost"] += c.cost
        e["latency_s"] += c.latency_s
        e["tokens"] += c.prompt_tokens + c.completion_tokens
    return {
        "cost": sum(c.cost for c in calls),
        "latency_s": sum(c.latency_s for c in calls),
        "prompt_tokens": sum(c.prompt_tokens for c in calls),
        "completion_tokens": sum(c.completion_tokens for c in calls),
        "calls": by_node,
        "endpoints": by_endpoint,
    }
