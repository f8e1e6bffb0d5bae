"""Group rewards: the rollouts of one prompt -> one reward each (ToolOrchestra's `preference`).

Input: per rollout, whether it is correct and its features; the group reward's arguments.
Output: `GroupScores` (pure arithmetic: no I/O, no runtime types; `group_run` applies it to rollouts).

`preference(correct, features, weights=, clip=, min_std=)`:
1. Features are oriented so that higher is better: `oriented_features` multiplies each raw feature by
   its sign from the graph's `features` argument (`cost: -1, latency: -1`: cheaper and faster score
   higher; `expert_calls: 1`: each call to an expert counts as a positive feature that the row's
   preference weights reward or, with a negative weight, penalise). `accuracy` (1 correct, 0 wrong)
   is always a feature.
2. Each feature is min-max normalised over the group: (x - min) / (max - min), so the group's best
   rollout gets 1 and its worst 0. A feature that does not vary within the group carries no
   preference and normalises to 0. A feature a rollout lacks (an expert it never called) counts as 0.
3. preference = 0 for a wrong rollout; for a correct one, sum over features of weight x normalised
   value, weights from `weights` (the row's pref_vec, e.g. {accuracy: 1, cost: 0.5, expert-1: 0.2});
   a feature without a weight counts 0.
4. The group's preferences are z-scored with the population std: (p - mean) / std, clipped to
   [-clip, +clip]. A group with std <= min_std is dropped: every reward is 0.0 and `dropped` is True
   (no learning signal; trainers can filter on the flag).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_SIGNS: dict[str, float] = {"cost": -1.0, "latency": -1.0}
USAGE_FEATURES = {
    "cost": "cost",
    "latency": "latency_s",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
}


@dataclass(frozen=True)
class GroupScores:
    rewards: tuple[float, ...]  # what each rollout is trained on (0.0 everywhere when dropped)
    preference: tuple[float, ...]  # before the z-score
    mean: float
    std: float
    dropped: bool


def oriented_features(
    usage: Mapping[str, Any], state: Mapping[str, Any], signs: Mapping[str, float] | None = None
) -> dict[str, float]:
    """One rollout's features, each x its sign (higher is better).

    A name is a usage figure (`cost`, `latency` = summed call latency in s, `prompt_tokens`,
    `completion_tokens`, `calls` = number of calls) or a state variable holding a number or a mapping
    {key: number} (each key becomes a feature of its own, e.g. expert_calls -> expert-1, expert-2)."""
    out: dict[str, float] = {}
    for name, sign in (DEFAULT_SIGNS if signs is None else signs).items():
        sign = float(sign)
        if name in USAGE_FEATURES:
            out[name] = sign * float(usage.get(USAGE_FEATURES[name]) or 0.0)
        elif name == "calls":
            out[name] = sign * float(sum((usage.get("calls") or {}).values()))
        elif name in state:
            value = state[name]
            if isinstance(value, Mapping):
                for key, v in value.items():
                    out[str(key)] = sign * _number(v, f"{name}.{key}")
            else:
                out[name] = sign * _number(value, name)
        else:
            raise ValueError(
                f"unknown feature '{name}': use cost, latency, prompt_tokens, completion_tokens, "
                "calls or a state variable"
            )
    return out


def preference(
    correct: Sequence[bool],
    features: Sequence[Mapping[str, float]],
    *,
    weights: Mapping[str, Any] | None = None,
    clip: float = 3.0,
    min_std: float = 0.1,
) -> GroupScores:
    """ToolOrchestra's group reward (see the module docstring for the exact definition)."""
    if len(correct) != len(features):
        raise ValueError("one feature mapping per rollout")
    if weights is None:
        weights = {"accuracy": 1.0}
    if not isinstance(weights, Mapping):
        raise ValueError(f"weights must map feature names to numbers, got {type(weights).__name__}")
    if clip <= 0 or min_std < 0:
        raise ValueError("clip must be > 0 and min_std >= 0")
    rows = [{**f, "accuracy": 1.0 if ok else 0.0} for ok, f in zip(correct, features)]
    names = sorted({k for r in rows for k in r})
    norm: dict[str, list[float]] = {}
    for name in names:
        values = [r.get(name, 0.0) for r in rows]
        lo, hi = min(values), max(values)
        norm[name] = [(v - lo) / (hi - lo) if hi > lo else 0.0 for v in values]
    w = {str(k): _number(v, f"weights.{k}") for k, v in weights.items()}
    prefs = tuple(sum(w.get(n, 0.0) * norm[n][i] for n in names) if ok else 0.0 for i, ok in enumerate(correct))
    n = len(prefs)
    mean = sum(prefs) / n if n else 0.0
    std = math.sqrt(sum((p - mean) ** 2 for p in prefs) / n) if n else 0.0
    if std <= min_std:
        return GroupScores(tuple(0.0 for _ in prefs), prefs, mean, std, True)
    rewards = tuple(max(-clip, min(clip, (p - mean) / std)) for p in prefs)
    return GroupScores(rewards, prefs, mean, std, False)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {value!r}") from None
