"""Soak: many multi-turn rollouts (a thread with a tool) through `graphrl run`'s dataset runner, the
real SGLang client and a server injecting seeded faults into 10% of /generate requests.

Checks: zero invariant violations (every rollout checked against what the server saw, as it
finishes), every rollout accounted for (one result each, the trajectory file has every group once,
every line a valid sample), and memory flat: tracemalloc's traced bytes and RSS measured at a
checkpoint and at the end stay within a stated bound.

CI runs a reduced form (150 rollouts). The full size:

    GRAPHRL_SOAK=1000 .venv/bin/python -m pytest -q -s tests/reliability/test_soak.py
"""

from __future__ import annotations

import asyncio
import json
import os
import tracemalloc
from collections import Counter

from faultkit import (
    FaultySGLangServerForTests,
    Stopwatch,
    check_rollout,
    executor_over_http,
    memory_now,
    seeded_faults,
    soak_plan,
)

from graphrl.models.tokenizer import qwen_tokenizer
from graphrl.runtime.ledger import LedgerError, TrainingSample
from graphrl.runtime.runner import run_dataset

N = int(os.environ.get("GRAPHRL_SOAK", "150"))
FAULT_RATE = 0.10  # per /generate request
SEED = int(os.environ.get("GRAPHRL_SOAK_SEED", "1"))
CONCURRENCY = 32
CHECKPOINT = min(200, N // 3)  # memory is measured after this many rollouts and again at the end
# Bounds on growth between the checkpoint and the end. Per-rollout state is released when a rollout
# ends, so growth is noise (allocator, caches that are bounded by the plan): a leak of even 2 KB per
# rollout would be 1.6 MB over the 800 rollouts of the full soak.
TRACED_GROWTH_MAX = 1.5 * 2**20
RSS_GROWTH_MAX = 24 * 2**20


class CheckingExecutor:
    """What run_dataset sees as the executor: runs the real one, then checks each rollout at once
    against the server's record of it (and drops that record, so memory stays flat)."""

    def __init__(self, inner, server):
        self.inner = inner
        self.plan = inner.plan
        self.server = server
        self.statuses: dict[int, str] = {}
        self.kinds: Counter = Counter()
        self.violations: list[str] = []
        self.n_violations = 0
        self.requests = 0

    async def run(self, inp, abort=None):
        res = await self.inner.run(inp, abort=abort)
        served = self.server.take(inp.session_id)
        self.requests += len(served)
        try:
            self.kinds[check_rollout(self.plan, res, served)] += 1
        except (AssertionError, LedgerError) as exc:
            self.n_violations += 1
            if len(self.violations) < 10:
                self.violations.append(f"rollout {inp.rollout_id}: {exc!r}")
        assert inp.rollout_id not in self.statuses, "a rollout ran twice"
        self.statuses[inp.rollout_id] = res.status
        return res


def test_soak_faulty_engine_many_rollouts(tmp_path):
    """Two passes of `graphrl run`'s runner over one file: rows [0, CHECKPOINT), then all N rows
    (the second pass resumes: it skips the finished groups). Memory is measured after each pass,
    when no rollout is in flight, so the two numbers compare like with like."""
    tok = qwen_tokenizer()
    plan = soak_plan(tmp_path / "graph")
    rows = [{"prompt": f"question {i}", "label": "42"} for i in range(N)]
    out = tmp_path / "soak.jsonl"
    clock = Stopwatch()
    tracemalloc.start()
    try:
        with FaultySGLangServerForTests(tok, faults=seeded_faults(FAULT_RATE, SEED)) as srv:
            inner = executor_over_http(plan, srv.url, tok, timeout_s=2.0)
            ex = CheckingExecutor(inner, srv)
            decode = inner.endpoints.renderer("policy").decode

            async def main():
                try:
                    first = await run_dataset(
                        ex, rows[:CHECKPOINT], out, concurrency=CONCURRENCY, seed=SEED, decode=decode, progress=False
                    )
                    mem1 = memory_now()
                    rest = await run_dataset(
                        ex, rows, out, concurrency=CONCURRENCY, seed=SEED, decode=decode, progress=False
                    )
                    return first, rest, mem1, memory_now()
                finally:
                    await asyncio.sleep(0.1)
                    await inner.endpoints.close()

            first, rest, (t1, r1), (t2, r2) = asyncio.run(main())
            leftover = srv.all_served()
            faults = {k: v for k, v in srv.counts.items() if k != "ok"}
            total_requests = sum(srv.counts.values())
    finally:
        tracemalloc.stop()

    # every rollout ran once and was checked; nothing the server saw is unaccounted for
    assert ex.n_violations == 0, ex.violations
    assert sorted(ex.statuses) == list(range(N))
    assert leftover == [] and ex.requests == total_requests
    assert (first.rollouts, rest.rollouts, rest.skipped_groups) == (CHECKPOINT, N - CHECKPOINT, CHECKPOINT)
    assert first.statuses + rest.statuses == Counter(ex.statuses.values())
    injected = sum(faults.values())
    assert injected > 0 and set(ex.kinds) - {"ok"}, "the soak must actually meet faults"

    # the trajectory file: every group once, complete, every sample line valid
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    by_group = Counter(rec["group"] for rec in lines)
    assert sorted(by_group) == list(range(N))
    for rec in lines:
        assert by_group[rec["group"]] == rec["group_lines"]
        assert rec["rollout_id"] == rec["group"] and rec["status"] == ex.statuses[rec["rollout_id"]]
        if rec["num_samples"]:
            TrainingSample.from_json(rec)  # check_invariants again, from the file

    report = {
        "rollouts": N,
        "seconds": round(clock.s, 1),
        "requests": total_requests,
        "faults_injected": faults,
        "rollouts_by_fault": dict(ex.kinds),
        "statuses": dict(Counter(ex.statuses.values())),
        "samples": first.samples + rest.samples,
        "violations": ex.n_violations,
        "traced_MiB": [round(t1 / 2**20, 3), round(t2 / 2**20, 3)],
        "rss_MiB": [round(r1 / 2**20, 1), round(r2 / 2**20, 1)],
        "checkpoints": [CHECKPOINT, N],
    }
    print("\nsoak:", json.dumps(report))
    assert t2 - t1 < TRACED_GROWTH_MAX, report
    assert r2 - r1 < RSS_GROWTH_MAX, report
