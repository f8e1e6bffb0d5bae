"""Reward post-processing for slime: samples (flattened) -> (raw rewards, normalised rewards).

Input: every sample of a rollout step, in slime's order; `args` (reward_key, advantage_estimator,
rewards_normalization, grpo_std_normalization); the plan (credit mode).
Output: two lists aligned with `samples`.

Why: with fan-out a prompt group holds a different number of samples per rollout, so slime's default
(reshape by n_samples_per_prompt, or one global group) is wrong. Here each rollout counts once: its
reward is normalised within its prompt group (GRPO: minus the group mean, divided by the std when
grpo_std_normalization), then credited to its samples — `even`: divided by the rollout's number of
samples, `broadcast`: given to each. Rollouts removed from training still count in their group.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from ..plan import Plan

GROUP_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_ESTIMATORS = ("grpo", "gspo", "cispo")


def _value(reward: Any, key: str | None) -> float:
    if isinstance(reward, dict):
        if key is None:
            raise ValueError("dict rewards need --reward-key (the graph's reward.key)")
        reward = reward[key]
    return 0.0 if reward is None else float(reward)


def post_process(args: Any, samples: list[Any], plan: Plan) -> tuple[list[float], list[float]]:
    key = getattr(args, "reward_key", None)
    raw = [_value(s.reward, key) for s in samples]
    groups: "OrderedDict[Any, OrderedDict[Any, list[int]]]" = OrderedDict()
    rollout_reward: dict[tuple[Any, Any], float] = {}
    for i, s in enumerate(samples):
        info = (getattr(s, "metadata", None) or {}).get("graphrl") or {}
        rid = getattr(s, "rollout_id", None)
        rid = ("sample", i) if rid is None else rid
        gid = getattr(s, "group_index", None)
        groups.setdefault(gid, OrderedDict()).setdefault(rid, []).append(i)
        if (gid, rid) not in rollout_reward:
            rr = info.get("rollout_reward")
            rollout_reward[(gid, rid)] = _value(rr, key) if rr is not None else raw[i]
    normalize = (getattr(args, "advantage_estimator", "grpo") in GROUP_ESTIMATORS
                 and getattr(args, "rewards_normalization", True))
    use_std = getattr(args, "advantage_estimator", "grpo") in STD_ESTIMATORS and getattr(
        args, "grpo_std_normalization", True)
    credit = plan.reward.credit if plan.reward else "even"
    out = [0.0] * len(samples)
    for gid, rollouts in groups.items():
        values = [rollout_reward[(gid, rid)] for rid in rollouts]
        if normalize:
            mean = sum(values) / len(values)
            adv = [v - mean for v in values]
            if use_std:
                # unbiased std, as torch.std (slime's default path) computes it
                std = math.sqrt(sum(a * a for a in adv) / (len(adv) - 1)) if len(adv) > 1 else float("nan")
                adv = [a / (std + 1e-6) if not math.isnan(std) else 0.0 for a in adv]
        else:
            adv = values
        for a, idxs in zip(adv, rollouts.values()):
            share = a / len(idxs) if credit == "even" else a
            for i in idxs:
                out[i] = share
    return raw, out
