"""Resuming a trajectory file only with the settings that wrote it.

Input: an existing trajectory JSONL path and the current run's settings (`{"plan_sha256", "run":
{engine, model, tokenizer, n_samples, seed, temperature, max_tokens_cap, data_sha256}}`, what
`graphrl.app.run` records on every line).
Output: nothing when the file is missing, empty, or was written with the same settings; otherwise
`ResumeMismatch` (a usage error, exit 2) naming each setting that differs, the file, and the two
ways out (`--force` to overwrite it, or a new `--out`).

Invariants: only the first complete line is read (every line of one run carries the same settings);
a file whose lines carry no settings (written before they were recorded, or by another tool) is a
mismatch too -- appending to it could mix two runs silently; nothing is written here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import UsageProblem


class ResumeMismatch(UsageProblem):
    """`--out` holds a run with other settings (exit 2)."""


def first_record(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    return None
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                return rec if isinstance(rec, dict) else None
    except FileNotFoundError:
        return None
    return None


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    out = []
    if old.get("plan_sha256") != new.get("plan_sha256"):
        out.append(
            f"graph: {old.get('graph')} (plan {str(old.get('plan_sha256'))[:12]}) vs {new.get('graph')} "
            f"(plan {str(new.get('plan_sha256'))[:12]})"
        )
    was, now = old.get("run") or {}, new.get("run") or {}
    for key in sorted(set(was) | set(now)):
        if was.get(key) != now.get(key):
            out.append(f"{key}: {was.get(key)!r} vs {now.get(key)!r}")
    return out


def check_resume(path: str | Path, current: Mapping[str, Any]) -> None:
    """Raise `ResumeMismatch` unless `path` is absent/empty or was written with `current`'s settings."""
    rec = first_record(Path(path))
    if rec is None:
        return
    if not isinstance(rec.get("run"), dict):
        raise ResumeMismatch(
            f"{path} holds trajectories without recorded run settings, so this run cannot resume "
            "it safely: pass --force to overwrite it, or choose a new --out"
        )
    diff = differences(rec, current)
    if diff:
        raise ResumeMismatch(
            f"{path} was written with other settings ({'; '.join(diff)}; file vs now): pass --force "
            "to overwrite it, or choose a new --out"
        )
