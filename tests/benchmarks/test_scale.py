"""`python -m benchmarks.scale`: the scale curve's harness (its correctness, never its timings), and
the rule that names the largest concurrency one rollout process sustains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.scale import bundled, busy, sustained


def _row(c: int, on_cpu: float, waiting: float = 0.0) -> dict:
    return {"concurrency": c, "loop_cpu_use": on_cpu, "loop_wait": waiting, "client_cpu_use": on_cpu}


def test_sustained_stops_where_the_event_loop_saturates():
    rows = [_row(1, 0.1), _row(8, 0.5), _row(64, 0.85, 0.1), _row(256, 0.99)]
    assert sustained(rows) == (8, "client busy 0.95 at c=64")


def test_waiting_for_a_cpu_counts_as_busy():
    rows = [_row(8, 0.3), _row(64, 0.45, 0.5)]  # starved by other processes: the loop never idles
    assert sustained(rows)[0] == 8


def test_sustained_reaches_the_top_when_nothing_saturates():
    rows = [_row(8, 0.4, 0.2), _row(1, 0.1)]  # any order
    assert sustained(rows) == (8, "not saturated at the largest level measured")


def test_a_process_busy_in_its_threads_is_busy():
    row = {"concurrency": 64, "loop_cpu_use": 0.7, "loop_wait": 0.05, "client_cpu_use": 0.97}  # tokenizer threads
    assert busy(row) == 0.97 and sustained([_row(8, 0.3), row])[0] == 8


def test_old_results_fall_back_to_client_cpu():
    assert busy({"client_cpu_use": 0.95}) == 0.95


def test_every_bundled_graph_is_on_the_curve():
    top = sorted(p.stem for p in (REPO / "graphs").glob("*.yaml"))
    assert bundled()[: len(top)] == top
    examples = [n for n in bundled() if n.startswith("examples/")]
    for path in (REPO / "graphs" / "examples").glob("*.yaml"):  # on the curve, or a child run through one that is
        name = f"examples/{path.stem}"
        assert name in examples or any(
            f"graph: {path.name}" in (REPO / "graphs" / f"{e}.yaml").read_text() for e in examples
        ), name
    assert {"hello", "memagent", "toolorchestra", "search_r1", "retool"} <= set(bundled())


@pytest.mark.slow
def test_a_tiny_curve_runs(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("bm25s")
    out = tmp_path / "scale.json"
    cmd = [sys.executable, "-m", "benchmarks.scale", "--quick", "--graphs", "hello", "search_r1", "retool"]
    cmd += ["--concurrency", "1", "3", "--min-rollouts", "3", "--json", str(out), "--build-dir", str(tmp_path)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    cells = json.loads(out.read_text())["cells"]
    assert sorted((c["workflow"], c["concurrency"]) for c in cells) == [
        (g, c) for g in ("hello", "retool", "search_r1") for c in (1, 3)
    ]
    for c in cells:
        assert c["rollouts"] == 3 and sum(c["statuses"].values()) >= 3
        assert c["calls"] >= 3 and c["cpu_ms_per_call"] > 0 and c["rss_peak_mb"] > 0
        assert c["mismatch_tokens"] == 0 and c["malformed"] == 0
    assert "| hello | 3 |" in done.stdout and "sustained concurrency" in done.stdout
