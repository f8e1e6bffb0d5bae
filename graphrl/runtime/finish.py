"""A finished rollout's samples and usage: builders frozen, credit assigned, statuses settled.

Input: the rollout's samples (frozen or still building), its reward and reward spec, its status and
id; or its call records. Output: the training samples in creation order, each with its index,
rollout id, status and credited reward; the usage summary rewards read as `usage`.

Invariants: a thread sample with no response yet is dropped (nothing to train on); a failed or
aborted rollout marks every sample so; credit splits exactly the scalar reward (ledger.assign_credit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
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
) -> tuple[TrainingSample, ...]:
    frozen: list[TrainingSample] = []
    for s in samples:
        if isinstance(s, SampleBuilder):
            try:
                s = s.freeze()
            except LedgerError:
                continue  # a thread sample with no response yet: nothing to train on
        frozen.append(s)
    credits: tuple[Any, ...] = (None,) * len(frozen)
    if reward is not None and frozen and spec is not None:
        credits = assign_credit(reward_scalar(reward, spec.key), len(frozen), spec.credit, spec.discount)
    out = []
    for i, (s, credit) in enumerate(zip(frozen, credits)):
        st = status if status in ("aborted", "failed") else s.status
        out.append(dataclasses.replace(s, index=i, rollout_id=rollout_id, status=st, reward=credit))
    return tuple(out)


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
