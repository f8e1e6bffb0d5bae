"""`python -m benchmarks.sandbox`: its table (one row per backend that works here, the bare subprocess
as the base of both ratios) and its CPU meter (the machine's busy time from /proc/stat). Never its
timings: those live in the benchmark's output."""

from __future__ import annotations

import math
import os
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


def _fits(ratio: float, value: float, base: float) -> bool:
    """Whether a printed ratio (to 0.01) can be value / base where both were printed rounded to 0.1."""
    ends = [v / b for v in (value - 0.05, value + 0.05) for b in (base - 0.05, base + 0.05) if b > 0]
    return min(ends) - 0.005 <= ratio <= max(ends) + 0.005


def test_a_tiny_run_prints_every_backend_with_both_ratios():
    from graphrl.tools.sandbox_host import bubblewrap_works, fork_works

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
        "tree",
        "CPU",
        "ms",
        "x",
        "bare",
        "client",
        "ms",
        "x",
        "bare",
    ]
    rows, trees, clients = {}, {}, {}
    for line in lines[2:]:
        if line.startswith(("machine idle", "tree CPU: n/a")) or " of " in line:
            continue
        name, cells = line[:22].strip(), line[22:].split()
        rows[name] = [float(c) for c in cells[:6]]
        trees[name] = cells[6:8]
        clients[name] = (float(cells[8]), float(cells[9]))
    expected = {"bare python -I -c", "none (isolate=False)", "launcher", "launcher strict", "launcher warm"}
    if bubblewrap_works():
        expected |= {"bubblewrap", "bubblewrap strict", "bubblewrap warm"}
    if fork_works():
        expected |= {"fork server", "fork server strict"}
    assert set(rows) == expected
    bare = rows["bare python -I -c"]
    assert bare[3] == 1.0 and bare[5] == 1.0  # both ratios are against the bare row of the same run
    for name, (med, p90, rate, ratio, cpu, cpu_ratio) in rows.items():
        assert 0 < med <= p90 and rate > 0, name
        # each ratio is of unrounded figures; printed, the figures are rounded to 0.1 ms, the ratio to 0.01
        assert _fits(ratio, med, bare[0]), name
        # CPU per call can be near 0, even below, on a busy machine (the idle CPU measured before the
        # runs is subtracted)
        assert math.isfinite(cpu), name
        assert _fits(cpu_ratio, cpu, bare[4]), (name, cpu, cpu_ratio, bare[4])
    assert any(line.startswith("launcher warm: ") and "served warm" in line for line in lines)
    base_client = clients["bare python -I -c"]
    assert base_client[1] == 1.0 and base_client[0] > 0  # the calling process's own CPU: never nothing
    for name, (ms, ratio) in clients.items():
        assert ms > 0 and math.isclose(ratio, ms / base_client[0], rel_tol=0.01, abs_tol=0.002), name
    if "tree CPU: n/a" not in out.stdout:  # the meter was there: numbers against the bare row
        own = {name: (float(a), float(b)) for name, (a, b) in trees.items()}
        assert own["bare python -I -c"][1] == 1.0
        for name, (ms, ratio) in own.items():  # every call starts an interpreter or forks one: > 1 ms
            assert ms > 1.0 and math.isclose(ratio, ms / own["bare python -I -c"][0], rel_tol=0.01, abs_tol=0.002), name
    else:
        assert all(cells == ["n/a", "n/a"] for cells in trees.values())


def test_the_tree_meter_counts_the_children_and_cleans_up():
    """`TreeCpu` counts what this process's children spend (a busy child of 0.3 s of CPU), and leaves
    no group behind when closed."""
    from benchmarks.sandbox import TreeCpu

    meter = TreeCpu.open()
    if meter is None:
        pytest.skip("no cgroup v1 cpuacct hierarchy writable here (root only)")
    try:
        before = meter.seconds()
        busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
        subprocess.run([sys.executable, "-I", "-S", "-c", busy], check=True, timeout=60)
        spent = meter.seconds() - before
    finally:
        meter.close()
    assert 0.3 <= spent < 3.0
    assert not Path(meter.path).exists()
    assert str(os.getpid()) in Path(meter.home, "cgroup.procs").read_text().split()
