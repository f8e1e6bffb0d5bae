"""Trajectory files -> `Trajectory`: rollouts grouped by prompt, each with its training samples.

Input: a `graphrl run` JSONL file (one line per training sample; see runtime/runner.py `sample_line`),
or a slime debug rollout dump (`--save-debug-rollout-data`, a `.pt` file: torch-pickled
`{"rollout_id": ..., "samples": [Sample.to_dict(), ...]}`, or a list of Samples or dicts with slime's
field names; graphrl's spans, calls and path in `metadata["graphrl"]`).
Output: a frozen `Trajectory` (rollouts sorted by group, then sample number n; samples by index).

Invariants: a malformed input raises `TrajectoryError` whose message starts with `file:line:` (JSONL)
or `file: sample K:` (.pt); nothing is dropped silently; for every sample
len(loss_mask) == response_length == len(log_probs) <= len(tokens), spans lie inside the response.
Security: `.pt` files are unpickled (`torch.load(weights_only=False)`): trusted input only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

try:
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # orjson is a core dependency; plain json keeps this module importable without it
    _loads = json.loads


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read; the message is located (file:line:)."""


class MissingTorch(TrajectoryError):
    """A `.pt` dump needs torch."""


@dataclass(frozen=True)
class Sample:
    index: int  # position among the rollout's training samples
    status: str
    reward: Any  # the sample's credit (float, dict or None)
    tokens: tuple[int, ...]
    response_length: int
    loss_mask: tuple[int, ...]
    log_probs: tuple[float, ...]
    spans: tuple[tuple[str, int, int, int, int, str], ...]  # node, visit, start, end, mask, kind
    calls: tuple[Mapping[str, Any], ...]
    response: str | None
    where: str  # file:line of its record

    @property
    def prompt_length(self) -> int:
        return len(self.tokens) - self.response_length

    @property
    def trained(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class Rollout:
    group: int
    n: int  # sample number within the prompt group
    rollout_id: Any
    status: str
    reward: Any  # the rollout's reward (before credit assignment)
    error: str | None
    path: tuple[tuple[str, int], ...]
    calls: tuple[Mapping[str, Any], ...]
    elapsed_s: float
    engine_s: float
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Trajectory:
    source: str
    graph: str | None
    plan_sha256: str | None
    rollouts: tuple[Rollout, ...]
    notes: tuple[str, ...] = ()  # things skipped while reading (an unfinished last line)
    tokenizer: str | None = None  # the tokenizer the run recorded ("run": {"tokenizer"}), if any

    def groups(self) -> list[int]:
        return sorted({r.group for r in self.rollouts})

    def select(self, group: int | None = None, n: int | None = None) -> Trajectory:
        keep = tuple(r for r in self.rollouts if (group is None or r.group == group) and (n is None or r.n == n))
        return replace(self, rollouts=keep)


def scalar_reward(reward: Any) -> float | None:
    """A number for tables: the reward itself, or `score`, else the first number of a dict reward."""
    if isinstance(reward, bool):
        return float(reward)
    if isinstance(reward, (int, float)):
        return float(reward)
    if isinstance(reward, Mapping):
        if isinstance(reward.get("score"), (int, float)):
            return float(reward["score"])
        return next((float(v) for v in reward.values() if isinstance(v, (int, float))), None)
    return None


_BOXED = re.compile(r"\\boxed\{")


def final_answer(r: Rollout) -> str:
    """The rollout's answer for the group table: the reward's `pred` (the answer as written, see
    rewards/scorer.py), else the last \\boxed{} of the last response, else its tail."""
    if isinstance(r.reward, Mapping) and isinstance(r.reward.get("pred"), str):
        return r.reward["pred"]
    text = next((s.response for s in reversed(r.samples) if s.response), "") or ""
    hits = list(_BOXED.finditer(text))
    if hits:
        i, depth, out = hits[-1].end(), 1, []
        while i < len(text) and depth:
            c = text[i]
            depth += (c == "{") - (c == "}")
            if depth:
                out.append(c)
            i += 1
        return "".join(out)
    return text.strip()[-80:]


def _check_sample(s: Sample) -> None:
    n = s.response_length
    if not 0 <= n <= len(s.tokens):
        raise TrajectoryError(f"{s.where}: response_length {n} but {len(s.tokens)} tokens")
    if len(s.loss_mask) != n:
        raise TrajectoryError(f"{s.where}: loss_mask has {len(s.loss_mask)} entries, response_length is {n}")
    if len(s.log_probs) != n:
        raise TrajectoryError(f"{s.where}: rollout_log_probs has {len(s.log_probs)} entries, response_length is {n}")
    for node, visit, a, b, mask, kind in s.spans:
        if not 0 <= a <= b <= n:
            raise TrajectoryError(f"{s.where}: span of node '{node}' [{a}, {b}) is outside the response (0..{n})")


def _span(sp: Any, where: str) -> tuple[str, int, int, int, int, str]:
    try:
        return (
            str(sp["node"]),
            int(sp.get("visit", 0)),
            int(sp["start"]),
            int(sp["end"]),
            int(sp.get("mask", 0)),
            str(sp.get("kind", "")),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise TrajectoryError(f"{where}: a span needs node, start and end, got {str(sp)[:80]}") from None


def _ints(v: Any, what: str, where: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (v.tolist() if hasattr(v, "tolist") else v or ()))
    except (TypeError, ValueError):
        raise TrajectoryError(f"{where}: {what} must be a list of integers") from None


def _floats(v: Any, what: str, where: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in (v.tolist() if hasattr(v, "tolist") else v or ()))
    except (TypeError, ValueError):
        raise TrajectoryError(f"{where}: {what} must be a list of numbers") from None


def _sample(rec: Mapping[str, Any], where: str, index: int) -> Sample:
    tokens = _ints(rec.get("tokens"), "tokens", where)
    try:
        n = int(rec.get("response_length") or 0)
    except (TypeError, ValueError):
        raise TrajectoryError(f"{where}: response_length must be an integer") from None
    mask = rec.get("loss_mask")
    lps = rec.get("rollout_log_probs")
    s = Sample(
        index=index,
        status=_status(rec.get("status")),
        reward=rec.get("reward"),
        tokens=tokens,
        response_length=n,
        loss_mask=_ints(mask, "loss_mask", where) if mask is not None else (1,) * n,
        log_probs=_floats(lps, "rollout_log_probs", where) if lps is not None else (0.0,) * n,
        spans=tuple(_span(sp, where) for sp in rec.get("spans") or ()),
        calls=tuple(rec.get("calls") or ()),
        response=rec.get("response"),
        where=where,
    )
    _check_sample(s)
    return s


def _status(v: Any) -> str:
    v = getattr(v, "value", v)
    return str(v).lower().removeprefix("status.") if v is not None else "completed"


def _path(v: Any, where: str) -> tuple[tuple[str, int], ...]:
    try:
        return tuple((str(p[0]), int(p[1])) for p in v or ())
    except (TypeError, ValueError, IndexError, KeyError):
        raise TrajectoryError(f"{where}: rollout.path must be a list of [node, visit]") from None


def load_jsonl(path: str | Path) -> Trajectory:
    path = Path(path)
    rollouts: dict[tuple[int, int], dict[str, Any]] = {}
    graph = sha = tokenizer = None
    notes: list[str] = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                rec = _loads(raw)
            except ValueError:
                rec = None
            if rec is None:  # orjson refuses NaN/Infinity, which Python's json writes (e.g. a NaN reward)
                try:
                    rec = json.loads(raw)
                except ValueError as exc:
                    if not raw.endswith(b"\n"):  # only the last line can lack one
                        notes.append(f"{where}: skipped an unfinished last line (a run still writing, or killed)")
                        break
                    col = getattr(exc, "colno", 1)
                    raise TrajectoryError(f"{where}:{col}: not valid JSON: {getattr(exc, 'msg', exc)}") from None
            if not isinstance(rec, dict):
                raise TrajectoryError(f"{where}:1: a trajectory line must be a JSON object")
            if "group" not in rec or "rollout_id" not in rec:
                raise TrajectoryError(
                    f"{where}:1: not a graphrl trajectory line (no 'group'/'rollout_id'); "
                    "expected the output of `graphrl run`"
                )
            graph, sha = graph or rec.get("graph"), sha or rec.get("plan_sha256")
            if tokenizer is None and isinstance(rec.get("run"), dict) and isinstance(rec["run"].get("tokenizer"), str):
                tokenizer = rec["run"]["tokenizer"]
            key = (int(rec["group"]), int(rec.get("n", 0)))
            ro = rollouts.setdefault(key, {"samples": [], "rec": rec, "where": where})
            if rec.get("rollout") is not None:
                ro["rollout"], ro["rec"] = rec["rollout"], rec
            if rec.get("tokens") is not None and int(rec.get("num_samples", 1)) > 0:
                ro["samples"].append(_sample(rec, where, int(rec.get("sample_index", len(ro["samples"])))))
    out = []
    for (group, n), ro in sorted(rollouts.items()):
        rec, info = ro["rec"], ro.get("rollout") or {}
        samples = tuple(sorted(ro["samples"], key=lambda s: s.index))
        status = rec.get("status") if not samples else samples[0].status
        out.append(
            Rollout(
                group=group,
                n=n,
                rollout_id=rec.get("rollout_id"),
                status=_status(status),
                reward=rec.get("rollout_reward", rec.get("reward")),
                error=rec.get("error"),
                path=_path(info.get("path"), ro["where"]),
                calls=tuple(info.get("calls") or [c for s in samples for c in s.calls]),
                elapsed_s=float(info.get("elapsed_s") or 0.0),
                engine_s=float(info.get("engine_s") or 0.0),
                samples=samples,
            )
        )
    return Trajectory(str(path), graph, sha, tuple(out), tuple(notes), tokenizer)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def load_pt(path: str | Path) -> Trajectory:
    """A slime debug rollout dump. Unpickles arbitrary objects: only open files you trust."""
    try:
        import torch
    except ImportError:
        raise MissingTorch(f"{path}: reading slime .pt dumps needs torch (pip install torch)") from None
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise TrajectoryError(f"{path}: not a readable torch file: {type(exc).__name__}: {exc}") from None
    items = obj.get("samples") if isinstance(obj, Mapping) else obj
    if not isinstance(items, (list, tuple)):
        raise TrajectoryError(f"{path}: expected a dict with 'samples' or a list of samples, got {type(obj).__name__}")
    groups: dict[int, dict[Any, dict[str, Any]]] = {}
    graph = None
    for k, item in enumerate(items):
        where = f"{path}: sample {k}"
        meta = _field(item, "metadata") or {}
        gmeta = meta.get("graphrl") or {} if isinstance(meta, Mapping) else {}
        graph = graph or gmeta.get("graph")
        group = int(_field(item, "group_index") if _field(item, "group_index") is not None else 0)
        rid = gmeta.get("rollout_id", _field(item, "index") if _field(item, "index") is not None else k)
        ro = groups.setdefault(group, {}).setdefault(rid, {"samples": [], "path": (), "calls": [], "meta": gmeta})
        rec = {
            name: _field(item, name)
            for name in ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward", "status", "response")
        }
        rec["spans"], rec["calls"] = gmeta.get("spans") or (), gmeta.get("calls") or ()
        s = _sample(rec, where, len(ro["samples"]))
        if not s.spans and s.response_length:  # no graphrl metadata: one span per run of equal mask
            s = replace(s, spans=_mask_runs(s.loss_mask))
        ro["samples"].append(s)
        if gmeta.get("path") and not ro["path"]:
            ro["path"] = _path(gmeta["path"], where)
        seen = {(c.get("node"), c.get("visit"), c.get("endpoint")) for c in ro["calls"]}
        ro["calls"] += [c for c in rec["calls"] if (c.get("node"), c.get("visit"), c.get("endpoint")) not in seen]
    out = []
    for group in sorted(groups):
        for n, (rid, ro) in enumerate(groups[group].items()):
            first = ro["samples"][0]
            reward = ro["meta"].get("rollout_reward", first.reward)
            out.append(
                Rollout(
                    group=group,
                    n=n,
                    rollout_id=rid,
                    status=first.status,
                    reward=reward,
                    error=ro["meta"].get("error"),
                    path=ro["path"],
                    calls=tuple(ro["calls"]),
                    elapsed_s=float(ro["meta"].get("elapsed_s") or 0.0),
                    engine_s=float(ro["meta"].get("engine_s") or 0.0),
                    samples=tuple(ro["samples"]),
                )
            )
    return Trajectory(str(path), graph, None, tuple(out))


def _mask_runs(mask: tuple[int, ...]) -> tuple[tuple[str, int, int, int, int, str], ...]:
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append(("?", 0, start, i, int(mask[start]), "generated" if mask[start] else "masked"))
            start = i
    return tuple(runs)


def load_trajectory(path: str | Path) -> Trajectory:
    p = Path(path)
    if p.suffix == ".pt":
        return load_pt(p)
    return load_jsonl(p)
