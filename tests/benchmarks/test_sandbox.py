"""`python -m benchmarks.sandbox`: its table (one row per backend that works here, the bare subprocess
as the base of both ratios) and its CPU meter (the machine's busy time from /proc/stat). Never its
timings: those live in the benchmark's output."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox and /proc/stat are Linux")


def test_the_cpu_meter_sees_a_busy_loop():
    from benchmarks.sandbox import _busy_s

    before = _busy_s()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    spent = _busy_s() - before
    assert 0.25 <= spent < 5.0  # at least the loop's own 0.3 s (ticks of 10 ms), not a wild number


def test_a_tiny_run_prints_every_backend_with_both_ratios():
    from graphrl.tools.sandbox_host import bubblewrap_works

    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.sandbox", "--calls", "2", "--gap", "0", "--concurrency", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("python tool per call: 2 sequential calls")
    assert lines[1].split() == [
        "backend",
        "median",
        "ms",
        "p90",
        "ms",
        "calls/s",
        "@2",
        "x",
        "bare",
        "CPU",
        "ms/call",
        "x",
        "bare",
    ]
    rows = {}
    for line in lines[2:]:
        if line.startswith("machine idle") or " of " in line:
            continue
        name, cells = line[:22].strip(), line[22:].split()
        rows[name] = [float(c) for c in cells]
    expected = {"bare python -I -c", "none (isolate=False)", "launcher", "launcher strict", "launcher warm"}
    if bubblewrap_works():
        expected |= {"bubblewrap", "bubblewrap strict", "bubblewrap warm"}
    assert set(rows) == expected
    bare = rows["bare python -I -c"]
    assert bare[3] == 1.0 and bare[5] == 1.0  # both ratios are against the bare row of the same run
    for name, (med, p90, rate, ratio, cpu, cpu_ratio) in rows.items():
        assert 0 < med <= p90 and rate > 0, name
        assert math.isclose(ratio, med / bare[0], abs_tol=0.011), name
        assert math.isfinite(cpu) and math.isclose(cpu_ratio, cpu / bare[4], rel_tol=0.05, abs_tol=0.011), name
    assert any(line.startswith("launcher warm: ") and "served by a warm sandbox" in line for line in lines)
