"""What a finished rollout means for training, decided once for every compile target.

Input: the plan, a `RolloutResult`, whether this is evaluation, and whether the training framework
scores the samples itself (a reward model outside the graph). Output: `Outcome`: the rollout's
status, its uncredited reward, and one `SampleOutcome` per sample a target writes (status, the
reward to write, whether the sample is kept out of the loss), or one placeholder.

Rules (a target adapter applies them and only writes its framework's fields):
- status: `aborted` when the rollout was aborted or any engine call came back aborted, else the
  executor's (completed | truncated | failed); ok = completed or truncated; `aborted_by` says who
  aborted it: "engine" (a call came back aborted), "caller" (the abort signal) or "graph" (it
  routed to `abort`: a decision about the row, which a target may treat as final);
- a rollout that is not ok keeps its samples, each with reward 0 and `remove` set (they still
  count in their group's normalisation); every sample of it carries the rollout's status;
- training: each sample gets its credit (`reward.credit`: even = reward / n, broadcast = reward,
  discounted = reward x discount ** (samples after it), last = the reward on the last sample only, the
  earlier ones kept out of the loss (`remove`));
  the last sample gets the rollout's status when it was truncated;
- evaluation: one sample per rollout (the last) carrying the whole rollout reward, so eval means
  are per rollout;
- a rollout without any sample gives one placeholder (masked, removed) carrying the rollout reward
  when ok, else 0;
- `scored_elsewhere`: every reward is None (the framework's reward model fills it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..plan import Plan
from .ledger import TrainingSample

OK_STATUSES = ("completed", "truncated")


def reward_scalar(reward: Any, key: str | None) -> Any:
    """A rollout's reward as training uses it: the `reward.key` value of a dict (KeyError when it is
    missing), the numeric items of a dict without a key, else the value as a float."""
    if isinstance(reward, Mapping):
        if key is not None:
            if key not in reward:
                raise KeyError(f"the reward has no key '{key}' (reward.key); it has {sorted(reward)}")
            return float(reward[key])
        return {k: float(v) for k, v in reward.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return float(reward)


@dataclass(frozen=True)
class SampleOutcome:
    sample: TrainingSample
    status: str
    reward: Any  # float | dict | None (None: scored elsewhere)
    remove: bool


@dataclass(frozen=True)
class Outcome:
    status: str
    ok: bool
    rollout_reward: Any  # the uncredited reward (None when not ok or the graph has none)
    samples: tuple[SampleOutcome, ...]
    placeholder: SampleOutcome | None  # set when the rollout made no sample (its `sample` is None)
    aborted_by: str | None = None  # aborted: "engine" | "caller" | "graph" (the graph routed to abort)


def settle(plan: Plan, res: Any, *, evaluation: bool = False, scored_elsewhere: bool = False) -> Outcome:
    engine_abort = any(c.finish_reason == "abort" for c in res.calls)
    aborted = res.status == "aborted" or engine_abort
    status = "aborted" if aborted else res.status
    aborted_by = ("engine" if engine_abort else getattr(res, "aborted_by", None) or "engine") if aborted else None
    ok = status in OK_STATUSES
    key = plan.reward.key if plan.reward else None
    credit = plan.reward.credit if plan.reward else "even"
    rollout_reward = reward_scalar(res.reward, key) if ok and res.reward is not None else None
    samples: list[TrainingSample] = list(res.samples)
    if evaluation and len(samples) > 1:
        samples = [samples[-1]]
    out = []
    for i, s in enumerate(samples):
        reward: Any
        if scored_elsewhere:
            reward = None
        elif not ok:
            reward = 0.0
        else:
            reward = rollout_reward if evaluation else s.reward
        s_status = s.status
        if status in ("aborted", "failed") or (status == "truncated" and i == len(samples) - 1):
            s_status = status  # the rollout's end decides for its last sample
        # credit `last`: only the final sample trains; the earlier ones stay out of the loss
        # (a sample with its own node reward is never superseded: it is scored on its own)
        superseded = not evaluation and credit == "last" and i < len(samples) - 1 and "own_reward" not in s.metadata
        out.append(SampleOutcome(s, s_status, reward, remove=not ok or superseded))
    placeholder = None
    if not out:
        reward = None if scored_elsewhere else (rollout_reward if ok and rollout_reward is not None else 0.0)
        placeholder = SampleOutcome(None, status, reward, remove=True)  # type: ignore[arg-type]
    return Outcome(status, ok, rollout_reward, tuple(out), placeholder, aborted_by)
