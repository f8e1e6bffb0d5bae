"""Dataset runs: trajectory lines (one per training sample) and resuming an interrupted `graphrl run`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from graphrl.engines.scripted import Scripted, ScriptedEngineForTests
from graphrl.engines.server import make_app, serving
from graphrl.models.tokenizer import QWEN_TOKEN_IDS
from graphrl.runtime.ledger import TrainingSample
from graphrl.runtime.runner import completed_groups, read_rows, regroup_credit, run_dataset

IM_END = QWEN_TOKEN_IDS["<|im_end|>"]

FANOUT = """
    name: fan
    inputs: {q: prompt}
    nodes:
      check:
        next:
          - {when: "q == 'abort me'", goto: abort}
          - goto: each
      each:
        llm: policy
        foreach: {over: "['a', 'b']"}
        prompt: [user: "{{ q }} {{ item }}"]
        next: final
      final: {llm: policy, prompt: [user: "final {{ q }}"]}
    reward:
      fn: exact_match
      args: {prediction: "{{ final.text }}", label: "{{ row.label }}"}
    """


def _run(kit, rows, out, **kw):
    plan = kit.plan(FANOUT)
    ex = kit.executor(plan, {"policy": kit.engine(lambda p, i: "yes")})
    return asyncio.run(run_dataset(ex, rows, out, decode=kit.r.decode, progress=False, **kw))


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_one_line_per_training_sample_with_rollout_info(kit, tmp_path):
    rows = [{"prompt": "q0", "label": "yes"}, {"prompt": "abort me", "label": "yes"}, {"prompt": "q2", "label": "no"}]
    out = tmp_path / "traj.jsonl"
    summary = _run(kit, rows, out, n_samples=2, seed=3)
    lines = _lines(out)
    # rows 0 and 2: 2 rollouts x 3 samples; row 1: 2 aborted rollouts with no sample, one line each
    assert len(lines) == 2 * 3 + 2 + 2 * 3
    assert summary.rollouts == 6 and summary.samples == 12 and summary.statuses == Counter(completed=4, aborted=2)
    by_group = Counter(rec["group"] for rec in lines)
    assert by_group == {0: 6, 1: 2, 2: 6}
    for rec in lines:
        assert rec["graph"] == "fan" and rec["group_lines"] == by_group[rec["group"]]
        assert rec["rollout_id"] == rec["row_index"] * 2 + rec["n"]
        if rec["group"] == 1:
            assert rec["num_samples"] == 0 and rec["status"] == "aborted" and "tokens" not in rec
            assert rec["rollout_reward"] is None and rec["error"]
            assert rec["rollout"]["path"] == [["check", 1]]
            continue
        s = TrainingSample.from_json(rec)  # re-checks the ledger invariants
        assert rec["num_samples"] == 3 and rec["status"] == "completed"
        assert rec["response"] == kit.r.decode(s.response_ids) == "yes<|im_end|>"
        assert rec["prompt_length"] == s.prompt_length
        want = 1.0 if rec["group"] == 0 else 0.0
        assert rec["rollout_reward"] == want and rec["reward"] == pytest.approx(want / 3)
        # the rollout's path and calls ride on its first sample only
        assert ("rollout" in rec) == (rec["sample_index"] == 0)
        if rec["sample_index"] == 0:
            assert rec["rollout"]["path"] == [["check", 1], ["each", 1], ["each", 2], ["final", 1]]
            assert [c["node"] for c in rec["rollout"]["calls"]] == ["each", "each", "final"]
        assert rec["remove"] is False  # completed, credit even: every sample trains
    # siblings: same rollout id, indices 0..2, credits sum to the rollout reward
    sib = [r for r in lines if r["rollout_id"] == 0]
    assert sorted(r["sample_index"] for r in sib) == [0, 1, 2]
    assert sum(r["reward"] for r in sib) == pytest.approx(1.0)


def test_rerun_resumes_complete_groups_and_cuts_a_torn_line(kit, tmp_path):
    rows = [{"prompt": f"q{i}", "label": "yes"} for i in range(4)]
    out = tmp_path / "traj.jsonl"
    _run(kit, rows[:2], out, n_samples=2)
    complete = out.read_bytes()
    # a kill mid-write of group 2: two whole lines of its six, then a torn one
    g2 = (json.dumps({"group": 2, "group_lines": 6, "row_index": 2}) + "\n") * 2
    out.write_bytes(complete + g2.encode() + b'{"group": 2, "group_li')
    assert completed_groups(out) == {0, 1}
    assert out.read_bytes() == complete  # the unfinished group is cut in place, torn line and all
    summary = _run(kit, rows, out, n_samples=2)
    assert summary.skipped_groups == 2 and summary.rollouts == 4  # groups 2 and 3 were (re)run
    lines = _lines(out)  # every line is valid JSON
    assert out.read_bytes().startswith(complete)
    assert Counter(rec["group"] for rec in lines) == {0: 6, 1: 6, 2: 6, 3: 6}  # no stale duplicates
    assert all("tokens" in rec for rec in lines)
    assert completed_groups(out) == {0, 1, 2, 3}
    # a third run has nothing left to do and leaves the file as it is
    before = out.read_bytes()
    assert _run(kit, rows, out, n_samples=2).rollouts == 0 and out.read_bytes() == before


def test_completed_groups_only_cuts_the_tail(tmp_path):
    out = tmp_path / "t.jsonl"
    rec = lambda g, n: json.dumps({"group": g, "group_lines": n}) + "\n"
    body = rec(0, 2) + rec(0, 2) + "not json\n" + rec(1, 1) + rec(3, 2)  # group 3 unfinished at the end
    out.write_text(body)
    assert completed_groups(out) == {0, 1}
    assert out.read_text() == rec(0, 2) + rec(0, 2) + "not json\n" + rec(1, 1)
    assert completed_groups(tmp_path / "missing.jsonl") == set()


def test_group_reward_hook_and_regroup_credit(kit, tmp_path):
    out = tmp_path / "traj.jsonl"
    seen = []

    def hook(results):
        seen.append([r.rollout_id for r in results])
        return regroup_credit(results, [2.0 * (i + 1) for i in range(len(results))], "even")

    _run(kit, [{"prompt": "q", "label": "yes"}], out, n_samples=2, group_reward=hook)
    assert seen == [[0, 1]]
    lines = _lines(out)
    assert {r["rollout_id"]: r["rollout_reward"] for r in lines} == {0: 2.0, 1: 4.0}
    assert [r["reward"] for r in lines if r["rollout_id"] == 1] == pytest.approx([4.0 / 3] * 3)


def test_one_bad_rollout_does_not_take_down_the_batch(kit, tmp_path):
    kit.write(
        "rw_batch_crash.py", "def score(q):\n    if q == 'bad':\n        raise RuntimeError('boom')\n    return 1.0\n"
    )
    plan = kit.plan("""
        name: b
        inputs: {q: prompt}
        nodes:
          a: {llm: policy, prompt: [user: "{{ q }}"]}
        reward: {fn: "rw_batch_crash:score", args: {q: "{{ q }}"}}
        """)
    ex = kit.executor(plan, {"policy": kit.engine(lambda p, i: "fine")})
    out = tmp_path / "traj.jsonl"
    rows = [{"prompt": "good"}, {"prompt": "bad"}, {"prompt": "good"}]
    summary = asyncio.run(run_dataset(ex, rows, out, n_samples=2, decode=kit.r.decode, progress=False))
    lines = _lines(out)
    assert summary.statuses == Counter(completed=4, failed=2) and len(lines) == 6
    bad = [r for r in lines if r["group"] == 1]
    assert all(r["status"] == "failed" and "RuntimeError: boom" in r["error"] for r in bad)
    assert all(r["remove"] is (r["group"] == 1) for r in lines)  # a failed rollout's samples stay out of the loss
    assert all(r["rollout_reward"] == 1.0 for r in lines if r["group"] != 1)


def test_read_rows_reports_the_bad_line(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n{oops\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:4:2: not valid JSON"):
        read_rows(data)
    assert read_rows(data, limit=2) == [{"prompt": "a"}, {"prompt": "b"}]
    data.write_text('["not", "an", "object"]\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:1:1: a data row must be a JSON object"):
        read_rows(data)


# ---------------------------------------------------------------- `graphrl run` killed and resumed


class SGLangStubForTests:
    """graphrl's SGLang-protocol server over a scripted engine, served from a thread of this process."""

    def __init__(self, tok):
        reply = tuple(tok.encode("forty two", add_special_tokens=False)) + (IM_END,)
        self.engine = ScriptedEngineForTests(lambda ids, params, i: Scripted(output_ids=reply), tokenizer=tok)
        self._tok = tok
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: self._loop.run_until_complete(self._serve()), daemon=True)
        self._thread.start()
        assert self._ready.wait(20)

    async def _serve(self):
        self._stop = asyncio.Event()
        async with serving(make_app(self.engine, self._tok, model_path="scripted")) as url:
            self.url = url
            self._ready.set()
            await self._stop.wait()

    def close(self):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)


SLOW_GRAPH = """
    name: slow
    inputs: {q: prompt}
    nodes:
      wait:
        tool: "slow_cli_tool:nap"
        args: {s: 0.25}
        next: answer
      answer:
        llm: policy
        prompt: [user: "{{ q }}"]
        max_tokens: 16
    reward:
      fn: exact_match
      args: {prediction: "{{ answer.text }}", label: "{{ row.label }}"}
    """

N_ROWS = 8


@pytest.fixture(scope="module")
def sglang_stub(tok):
    stub = SGLangStubForTests(tok)
    yield stub
    stub.close()


# Ctrl-C as a terminal sends it: a shell with job control starts a program with SIGINT's default
# action, but a test suite run from a non-interactive background job (`cmd &` in a script) inherits it
# ignored, and Python then keeps ignoring it. The child resets it before it execs the command.
_SIGINT_DEFAULT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
]


def _cli(kit, url, out, data):
    cmd = [
        str(Path(sys.executable).with_name("graphrl")),
        "run",
        str(kit.dir / "slow.yaml"),
        "--data",
        str(data),
        "--out",
        str(out),
        "--engine",
        "sglang",
        "--url",
        url,
        "--tokenizer",
        "qwen",
        "--n-samples",
        "2",
        "--concurrency",
        "2",
        "--quiet",
    ]
    return subprocess.Popen(
        [*_SIGINT_DEFAULT, *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=kit.dir,
        start_new_session=True,
    )


def _wait_for_lines(path: Path, n: int, proc, timeout=60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"graphrl run ended early ({proc.returncode}): {proc.stderr.read()}")
        time.sleep(0.02)
    raise AssertionError("no progress")


@pytest.mark.slow  # two `graphrl run` processes per case: ~8-15 s each
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_graphrl_run_killed_mid_run_resumes_without_loss_or_duplicates(kit, sglang_stub, sig):
    kit.write("slow_cli_tool.py", "import time\n\ndef nap(s):\n    time.sleep(s)\n    return 'rested'\n")
    kit.write("slow.yaml", SLOW_GRAPH)
    data = kit.dir / "rows.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": f"question {i}", "label": "forty two"}) + "\n" for i in range(N_ROWS))
    )
    out = kit.dir / "traj.jsonl"
    proc = _cli(kit, sglang_stub.url, out, data)
    _wait_for_lines(out, 4, proc)  # two groups (2 samples each) are on disk
    os.killpg(proc.pid, sig)
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    first = _lines(out)
    done_before = {rec["group"] for rec in first}
    assert 2 <= len(done_before) < N_ROWS, "the kill must land mid-run"
    if sig == signal.SIGKILL:  # a kill mid-write leaves a torn last line: simulate one
        with open(out, "a") as f:
            f.write('{"graph": "slow", "group": 7, "gro')
    proc = _cli(kit, sglang_stub.url, out, data)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert f"({len(done_before)} groups resumed from the file)" in stdout
    lines = _lines(out)  # valid JSONL: the torn line was cut
    assert len(lines) == N_ROWS * 2
    assert lines[: len(first)] == first  # nothing already written was lost or rewritten
    assert Counter(rec["group"] for rec in lines) == {g: 2 for g in range(N_ROWS)}
    assert sorted((rec["group"], rec["n"]) for rec in lines) == [(g, n) for g in range(N_ROWS) for n in range(2)]
    for rec in lines:
        assert rec["status"] == "completed" and rec["rollout_reward"] == 1.0, rec["error"]
        TrainingSample.from_json(rec)


def test_credit_last_marks_the_earlier_samples_removed(kit, tmp_path):
    """`remove` says which samples training keeps out of the loss, as a compile target does
    (`outcome.settle`): under `credit: last` every sample but the last of a rollout."""
    plan = kit.plan(FANOUT.replace("      fn: exact_match", "      credit: last\n      fn: exact_match"))
    ex = kit.executor(plan, {"policy": kit.engine(lambda p, i: "yes")})
    out = tmp_path / "traj.jsonl"
    asyncio.run(run_dataset(ex, [{"prompt": "q0", "label": "yes"}], out, decode=kit.r.decode, progress=False))
    lines = _lines(out)
    assert [(r["sample_index"], r["remove"]) for r in lines] == [(0, True), (1, True), (2, False)]
    assert [r["reward"] for r in lines] == [0.0, 0.0, 1.0]
