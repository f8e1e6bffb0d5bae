"""Dataset runs: data rows x n samples -> trajectory JSONL (one line per training sample) + a summary.

Input: an `Executor`, rows in slime's data format ({prompt, label, metadata}), n samples per prompt
(a group), a concurrency limit, a seed, an output path.
Output: the JSONL file and a `RunSummary`.

File contract: the lines of one prompt group are written together in one write() followed by
flush + fsync, after the whole group finished (group rewards need all of it). Every line records the
run's settings under "run" (model, tokenizer, ...: what `graphrl visualize` decodes with). A rerun
with the same output file and the same settings resumes (other settings: `ResumeMismatch`, exit 2): complete groups are kept and skipped, a torn last line (a kill mid-write) is cut
off, so an interrupted run never duplicates or loses a row. A rollout that produced no training
sample still writes one line (num_samples 0) carrying its status and error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.jsonl import MAX_LINE_BYTES, iter_jsonl
from ..plan import Plan
from .executor import Executor, RolloutInput, RolloutResult
from .ledger import TrainingSample, assign_credit
from .outcome import settle
from .resume import check_resume


@dataclass
class RunSummary:
    rollouts: int = 0
    skipped_groups: int = 0
    samples: int = 0
    statuses: Counter = field(default_factory=Counter)
    rewards: list[float] = field(default_factory=list)
    trained: Counter = field(default_factory=Counter)  # node -> trained tokens
    masked: Counter = field(default_factory=Counter)  # node -> masked tokens in samples
    generated: Counter = field(default_factory=Counter)  # node -> tokens generated (all calls)
    calls: Counter = field(default_factory=Counter)
    engine_s: float = 0.0
    rollout_s: float = 0.0
    wall_s: float = 0.0
    errors: Counter = field(default_factory=Counter)
    visits: Counter = field(default_factory=Counter)  # node -> visits (all rollouts)
    routes: Counter = field(default_factory=Counter)  # (the path's node names, its ending) -> count

    def add(self, res: RolloutResult, reward_key: str | None) -> None:
        self.rollouts += 1
        self.samples += len(res.samples)
        self.statuses[res.status] += 1
        if res.reward is not None:
            r: Any = res.reward
            if isinstance(r, dict):
                r = (
                    r.get(reward_key)
                    if reward_key
                    else next((v for v in r.values() if isinstance(v, (int, float))), None)
                )
            if isinstance(r, (int, float)):
                self.rewards.append(float(r))
        for s in res.samples:
            for sp in s.spans:
                (self.trained if sp.mask else self.masked)[sp.node] += sp.end - sp.start
        nodes = [p[0] for p in res.path]
        self.visits.update(nodes)
        ending = {"completed": "end", "aborted": "abort"}.get(res.status, res.status)
        self.routes[(tuple(nodes), ending)] += 1
        for c in res.calls:
            self.calls[c.node] += 1
            self.generated[c.node] += c.completion_tokens
        self.engine_s += res.engine_s
        self.rollout_s += res.elapsed_s
        if res.error:
            self.errors[error_key(res.error)] += 1

    def table(self) -> str:
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
        lines = [
            f"rollouts {self.rollouts} ({self.skipped_groups} groups resumed from the file), "
            f"training samples {self.samples}",
            f"reward mean {mean:.4f} over {len(self.rewards)} rewarded rollouts",
            "status   " + ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())),
            f"time     wall {self.wall_s:.2f} s; summed over rollouts: in rollouts {self.rollout_s:.2f} s, "
            f"waiting on engines {self.engine_s:.2f} s"
            + (
                f", client {self.rollout_s - self.engine_s:.2f} s"
                if self.engine_s <= self.rollout_s
                else " (more: a rollout's parallel calls overlap)"
            ),
            "",
            f"{'node':<20} {'calls':>7} {'generated':>10} {'trained':>10} {'masked':>10}",
        ]
        for node in sorted(set(self.calls) | set(self.trained) | set(self.masked)):
            lines.append(
                f"{node:<20} {self.calls[node]:>7} {self.generated[node]:>10} "
                f"{self.trained[node]:>10} {self.masked[node]:>10}"
            )
        if self.errors:
            lines.append("")
            lines += [f"error x{n}: {e}" for e, n in self.errors.most_common(5)]
        return "\n".join(lines)


def error_key(error: str, width: int = 200) -> str:
    """How the summary lists an error: the whole message (its location included), on one line, cut
    to `width` characters -- never just the part before the first colon (a path like ../g.yaml)."""
    message = " ".join(error.split())
    return message if len(message) <= width else message[: width - 3] + "..."


def read_rows(
    path: str | Path, limit: int | None = None, *, max_row_bytes: int = MAX_LINE_BYTES
) -> list[dict[str, Any]]:
    """JSONL rows (lines end with \\n; \\r\\n works too). Any bad line -- not UTF-8, not JSON, nested
    past Python's recursion limit, a number Python will not convert, not an object -- is a ValueError
    located at it (file:line:col); nothing else is raised for the file's content."""
    rows = []
    for lineno, row in iter_jsonl(path, max_line_bytes=max_row_bytes):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}:1: a data row must be a JSON object with prompt/label/metadata")
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows


def completed_groups(path: Path) -> set[int]:
    """Groups fully present in an existing trajectory file; cuts an unfinished tail in place.

    A group's lines are one write(), so only the file's tail can hold an unfinished group (a kill
    mid-write: some whole lines of the group and a torn one). That tail is cut back to the end of
    the last complete group: the group is rerun whole, and its partial lines are not left behind
    as duplicates of the rerun's."""
    if not path.exists():
        return set()
    data = path.read_bytes()

    def count(upto: int) -> tuple[dict[int, int], dict[int, int], int]:
        lines: dict[int, int] = defaultdict(int)
        expected: dict[int, int] = {}
        keep = pos = 0  # keep: the end of the last line that completed a group
        for raw in data[:upto].splitlines(keepends=True):
            pos += len(raw)
            if not raw.endswith(b"\n"):
                break  # a torn last line
            try:
                rec = json.loads(raw)
                group, group_lines = rec["group"], rec["group_lines"]
            except (ValueError, TypeError, KeyError):
                continue
            lines[group] += 1
            expected[group] = group_lines
            if lines[group] == group_lines:
                keep = pos
        return lines, expected, keep

    lines, expected, keep = count(len(data))
    if keep != len(data):
        with open(path, "r+b") as f:
            f.truncate(keep)
        lines, expected, _ = count(keep)
    return {g for g, n in lines.items() if n == expected.get(g)}


def sample_line(
    res: RolloutResult,
    s: TrainingSample | None,
    *,
    row_index: int,
    n: int,
    decode: Callable,
    base: dict[str, Any],
    removed: frozenset[int] = frozenset(),
) -> dict[str, Any]:
    """`removed`: the indexes of the rollout's samples that training keeps out of the loss."""
    rec: dict[str, Any] = dict(base)
    rec.update(
        row_index=row_index,
        group=res.group,
        n=n,
        rollout_id=res.rollout_id,
        sample_index=s.index if s else 0,
        num_samples=len(res.samples),
        status=s.status if s else res.status,
        reward=s.reward if s else None,
        rollout_reward=res.reward,
        error=res.error,
    )
    if s is not None:
        rec.update(s.to_json())
        rec["response"] = decode(s.response_ids)
        rec["prompt_length"] = s.prompt_length
        rec["remove"] = s.index in removed
    if s is None or s.index == 0:
        rec["rollout"] = {
            "path": [list(p) for p in res.path],
            "calls": [c.to_json() for c in res.calls],
            "elapsed_s": round(res.elapsed_s, 6),
            "engine_s": round(res.engine_s, 6),
        }
    return rec


async def run_dataset(
    executor: Executor,
    rows: list[dict[str, Any]],
    out: str | Path,
    *,
    n_samples: int = 1,
    concurrency: int = 8,
    seed: int | None = None,
    decode: Callable = str,
    group_reward: Callable[[list[RolloutResult]], list[RolloutResult]] | None = None,
    progress: bool = True,
    settings: dict[str, Any] | None = None,
) -> RunSummary:
    """`settings` (engine, model, tokenizer, ...) are recorded on every line under "run"; with them,
    an existing `out` is resumed only when it was written with the same settings (runtime/resume.py)."""
    out = Path(out)
    plan = executor.plan
    base: dict[str, Any] = {"graph": plan.name, "plan_sha256": plan.source.get("sha256")}
    if settings is not None:
        base["run"] = dict(settings)
        check_resume(out, base)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = completed_groups(out)
    summary = RunSummary(skipped_groups=len(done))
    reward_key = plan.reward.key if plan.reward else None
    sem = asyncio.Semaphore(max(1, concurrency))
    todo = [i for i in range(len(rows)) if i not in done]
    total = len(todo) * n_samples
    t0 = time.monotonic()
    finished = 0

    async def one(i: int, n: int) -> RolloutResult:
        nonlocal finished
        async with sem:
            rid = i * n_samples + n
            res = await executor.run(
                RolloutInput(
                    row=rows[i],
                    rollout_id=rid,
                    group=i,
                    seed=None if seed is None else seed + rid,
                    session_id=f"graphrl-{plan.name}-{rid}",
                )
            )
        finished += 1
        if progress:
            _progress(finished, total, t0)
        return res

    async def group(i: int, f) -> None:
        results = list(await asyncio.gather(*(one(i, n) for n in range(n_samples))))
        if group_reward is not None:
            results = group_reward(results)
        lines = []
        for n, res in enumerate(results):
            summary.add(res, reward_key)
            removed = _removed(plan, res)
            for s in res.samples or [None]:
                lines.append(sample_line(res, s, row_index=i, n=n, decode=decode, base=base, removed=removed))
        for rec in lines:
            rec["group_lines"] = len(lines)
        f.write("".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in lines))
        f.flush()
        os.fsync(f.fileno())

    # backslashreplace: a lone surrogate quoted from bad data (an error message, a tool's output) is
    # written as the JSON escape \udXXX -- still valid JSON that reads back the same -- instead of
    # failing the write and with it the whole run
    with open(out, "a", encoding="utf-8", errors="backslashreplace") as f:
        await asyncio.gather(*(group(i, f) for i in todo))
    if progress and total:
        sys.stderr.write("\n")
    summary.wall_s = time.monotonic() - t0
    return summary


def _removed(plan: Plan, res: RolloutResult) -> frozenset[int]:
    """The samples a compile target keeps out of the loss (`outcome.settle`: a rollout that is not ok,
    the samples before the last under `credit: last`); none where the reward cannot be settled (the
    summary reports that rollout's error)."""
    try:
        outcome = settle(plan, res)
    except (KeyError, TypeError, ValueError):
        return frozenset()
    return frozenset(o.sample.index for o in outcome.samples if o.remove)


def _progress(done: int, total: int, t0: float) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.monotonic() - t0, 1e-9)
    end = "\r" if sys.stderr.isatty() else "\n"
    if sys.stderr.isatty() or done == total or done % max(1, total // 10) == 0:
        sys.stderr.write(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} rollouts, {rate:.2f}/s{end}")
        sys.stderr.flush()


def regroup_credit(
    results: list[RolloutResult], rewards: Iterable[float], credit: str, discount: float = 1.0
) -> list[RolloutResult]:
    """Replace each rollout's reward (after a group-level post-process) and re-split its credit."""
    out = []
    for res, reward in zip(results, rewards):
        if res.samples and reward is not None:
            credits = assign_credit(float(reward), len(res.samples), credit, discount)
            samples = tuple(dataclasses.replace(s, reward=c) for s, c in zip(res.samples, credits))
        else:
            samples = res.samples
        out.append(dataclasses.replace(res, reward=reward, samples=samples))
    return out
