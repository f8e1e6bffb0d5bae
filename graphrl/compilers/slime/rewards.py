"""Reward post-processing for slime: samples (flattened) -> (raw rewards, normalised rewards).

Input: every sample of a rollout step, in slime's order (slime's --custom-reward-post-process-path
calls `f(args, samples)`); `args` (reward_key, advantage_estimator, rewards_normalization,
grpo_std_normalization); the plan (credit mode, group reward).
Output: two lists aligned with `samples`: raw = each sample's rollout reward (what slime logs),
normalised = what slime trains on.

Why: with fan-out a prompt group holds a different number of samples per rollout, so slime's default
(reshape by n_samples_per_prompt, else one global group) is wrong, and counting samples would weigh
a rollout by how many samples it made. Here each rollout counts once:
  1. rollouts are keyed by (group_index, rollout_id); the rollout's reward is the uncredited
     reward generate stored in metadata["graphrl"] (0 for failed/aborted rollouts, which still
     count) while every sample's reward is still what generate wrote; when something after
     generate changed one (a sample hook, a group RM: slime runs them before this), the reward is
     read back from the samples: sum(reward) / sum(credit weights), which inverts the credit
     (even: the sum, broadcast: the mean); a graph without reward (slime's RM scored the samples):
     the mean of its samples' rewards;
  2. a graph with `reward.group` replaces the rollout rewards of each prompt group by what the
     group reward gives (graphrl.rewards.group_run, the hook `graphrl run` uses: `preference` or a
     module:function), from each rollout's reward, usage and final state stored by generate and
     the row's metadata; a group reward that fails leaves the group's rewards as they were;
  3. within a prompt group: minus the group mean, divided by (std + 1e-6) when the estimator and
     grpo_std_normalization ask for it (unbiased std, as slime's torch.std; a group of one -> 0);
     estimators slime does not normalise get the reward as is;
  4. credit to the rollout's samples: `even` -> value / number of samples, `broadcast` -> value;
  5. samples with their own node reward (metadata["graphrl"]["own_reward"], "role") take no share:
     within the prompt group, each role's samples are normalised among themselves (3.) from their
     own rewards (role-aware normalisation: a solver is compared with solvers, a selector with
     selectors), and raw is their own reward.
raw (each sample's rollout reward) is also written to each sample's metadata["raw_reward"], the key
slime prefers over the returned raw list when it logs, so the log follows the hooks too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...plan import Plan
from ...rewards.group_run import group_reward_hook, scalar
from ...runtime.executor import RolloutResult
from ...runtime.ledger import CallRecord, credit_weights

GROUP_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_ESTIMATORS = ("grpo", "gspo", "cispo")


@dataclass
class Rollout:
    """One rollout's view for post-processing (the members a group reward function receives)."""

    rollout_id: Any
    group: Any
    indices: list[int] = field(default_factory=list)
    reward: float = 0.0
    status: str = "completed"
    info: dict[str, Any] = field(default_factory=dict)  # metadata["graphrl"] of its first sample
    row_metadata: dict[str, Any] = field(default_factory=dict)


def _value(reward: Any, key: str | None) -> float:
    if isinstance(reward, dict):
        if key is None:
            raise ValueError("dict rewards need --reward-key (the graph's reward.key)")
        reward = reward[key]
    return 0.0 if reward is None else float(reward)


def rollouts_by_group(args: Any, samples: list[Any]) -> dict[Any, list[Rollout]]:
    """Samples -> prompt groups of rollouts, in first-seen order; each rollout's reward (step 1)."""
    key = getattr(args, "reward_key", None)
    groups: dict[Any, dict[Any, Rollout]] = {}
    for i, s in enumerate(samples):
        rid = getattr(s, "rollout_id", None)
        rid = ("sample", i) if rid is None else rid
        gid = getattr(s, "group_index", None)
        ro = groups.setdefault(gid, {}).get(rid)
        if ro is None:
            meta = dict(getattr(s, "metadata", None) or {})
            info = meta.pop("graphrl", None) or {}
            ro = groups[gid][rid] = Rollout(
                rid,
                gid,
                info=info,
                status=info.get("status", "completed"),
                row_metadata={k: v for k, v in meta.items() if k not in ("raw_reward", "round_number")},
            )
        elif "rollout_calls" not in ro.info:  # the rollout-level part lives on one sample: keep that one
            info = (getattr(s, "metadata", None) or {}).get("graphrl") or {}
            if "rollout_calls" in info:
                ro.info = info
        ro.indices.append(i)
    for rollouts in groups.values():
        for ro in rollouts.values():
            values = [_value(samples[i].reward, key) for i in ro.indices]
            if "rollout_reward" not in ro.info:  # slime's reward model scored the samples
                ro.reward = sum(values) / len(values)
            elif _as_written(samples, ro.indices, values):  # None for failed/aborted rollouts: 0, still counted
                ro.reward = _value(ro.info["rollout_reward"], key)
            else:  # a hook or group RM changed a sample's reward after generate: read it back
                weights = credit_weights(
                    ro.info.get("credit") or "even", len(ro.indices), float(ro.info.get("discount") or 1.0)
                )
                ro.reward = sum(values) / sum(weights)
    return {gid: list(r.values()) for gid, r in groups.items()}


def _as_written(samples: list[Any], indices: list[int], values: list[float]) -> bool:
    """Every sample's reward is still the one generate wrote (metadata["graphrl"]["written_reward"])."""
    for i, v in zip(indices, values):
        info = (getattr(samples[i], "metadata", None) or {}).get("graphrl") or {}
        if "written_reward" in info and info["written_reward"] != v:
            return False
    return True


def _normalise(values: list[float], args: Any) -> list[float]:
    estimator = getattr(args, "advantage_estimator", "grpo")
    if estimator not in GROUP_ESTIMATORS or not getattr(args, "rewards_normalization", True):
        return list(values)
    mean = sum(values) / len(values)
    adv = [v - mean for v in values]
    if estimator in STD_ESTIMATORS and getattr(args, "grpo_std_normalization", True):
        if len(adv) < 2:
            return [0.0] * len(adv)
        std = math.sqrt(sum(a * a for a in adv) / (len(adv) - 1))
        adv = [a / (std + 1e-6) for a in adv]
    return adv


def group_rewards(
    plan: Plan, args: Any, groups: dict[Any, list[Rollout]], samples: list[Any]
) -> dict[Any, list[float]]:
    """Step 2: each prompt group's rollout rewards as the graph's group reward gives them."""
    rows, results = {}, {}
    for gid, rollouts in groups.items():
        first = samples[rollouts[0].indices[0]]
        rows[gid] = {
            "prompt": getattr(first, "prompt", None),
            "label": getattr(first, "label", None),
            "metadata": rollouts[0].row_metadata,
        }
        results[gid] = [
            RolloutResult(
                rollout_id=ro.rollout_id,
                group=gid,
                status=ro.status,
                reward=ro.reward if ro.status in ("completed", "truncated") else None,
                samples=(),
                path=(),
                calls=tuple(CallRecord.from_json(c) for c in ro.info.get("rollout_calls") or ()),
                error=None,
                state=dict(ro.info.get("state") or {}),
                elapsed_s=0.0,
                engine_s=0.0,
            )
            for ro in rollouts
        ]
    search = [
        Path(p) for p in (getattr(args, "graphrl_source_dir", None), Path(plan.source.get("file", ".")).parent) if p
    ]
    hook = group_reward_hook(plan, rows, search)
    key = plan.reward.key if plan.reward else None
    out = {}
    for gid, res in results.items():
        new = hook(res) if hook is not None else res
        out[gid] = [
            float(r.reward["score"]) if isinstance(r.reward, dict) and "score" in r.reward else scalar(r.reward, key)
            for r in new
        ]
    return out


def _own_rewards(samples: list[Any]) -> dict[int, tuple[str, float]]:
    """index -> (role, own reward) for the samples a node reward scored (metadata["graphrl"]); a
    failed or aborted rollout's samples count 0, as its rollout reward does."""
    out = {}
    for i, s in enumerate(samples):
        info = (getattr(s, "metadata", None) or {}).get("graphrl") or {}
        if info.get("own_reward") is not None:
            ok = info.get("status", "completed") in ("completed", "truncated")
            out[i] = (str(info.get("role")), float(info["own_reward"]) if ok else 0.0)
    return out


def post_process(args: Any, samples: list[Any], plan: Plan) -> tuple[list[float], list[float]]:
    groups = rollouts_by_group(args, samples)
    credit = plan.reward.credit if plan.reward else "even"
    discount = plan.reward.discount if plan.reward else 1.0
    values = {gid: [ro.reward for ro in rollouts] for gid, rollouts in groups.items()}
    if plan.reward is not None and plan.reward.group is not None:
        values = group_rewards(plan, args, groups, samples)
    raw = [0.0] * len(samples)
    out = [0.0] * len(samples)
    own = _own_rewards(samples)
    for gid, rollouts in groups.items():
        for ro, a in zip(rollouts, _normalise(values[gid], args)):
            shared = [i for i in ro.indices if i not in own]
            for i, w in zip(shared, credit_weights(credit, len(shared), discount) if shared else ()):
                raw[i] = ro.reward
                out[i] = a * w
        # samples with their own node reward: normalised within the prompt group per role (node)
        roles: dict[str, list[int]] = {}
        for ro in rollouts:
            for i in ro.indices:
                if i in own:
                    roles.setdefault(own[i][0], []).append(i)
        for indices in roles.values():
            for i, a in zip(indices, _normalise([own[i][1] for i in indices], args)):
                raw[i] = own[i][1]
                out[i] = a
    for s, r in zip(samples, raw):
        meta = getattr(s, "metadata", None)
        if isinstance(meta, dict) and isinstance(meta.get("graphrl"), dict):
            meta["raw_reward"] = r  # slime logs metadata["raw_reward"] over the returned raw list
    return raw, out
