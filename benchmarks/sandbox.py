"""The python tool's per-call cost, by sandbox backend, against a bare `python -I -c` subprocess.

Run: `python -m benchmarks.sandbox [--calls N] [--gap S] [--concurrency C]` (about a minute).
Prints a table: per backend, wall per call (median and p90 over N sequential calls of `print(1)`,
`--gap` seconds apart, as a rollout's tool calls are apart while the model generates; the backends
take turns, one call each per round, so a drift in the machine's speed falls on all of them), the
throughput of C concurrent calls, and the ratio of the median to the bare subprocess measured in
the same run. Rows: bare (`python -I -c`, no isolation at all), none (`run_python(isolate=False)`:
rlimits and process-group handling only), launcher, launcher strict, bubblewrap, bubblewrap strict
(where `bwrap` works), and each backend again with warm sandboxes (`SandboxPool`, 2 per loop, the
default). Three CPU meters per sequential call: the machine's busy time (/proc/stat: every process and
the kernel's own work, e.g. tearing down a call's network namespace, in ticks of 10 ms, less the idle
rate measured first); where it can be had (root, a cgroup v1 `cpuacct` hierarchy), this
process tree's own CPU (`TreeCpu`: the benchmark, the shells, bwrap and the sandboxes, to the
nanosecond, blind to the rest of the machine; "n/a" elsewhere); and the calling process's own
(`time.process_time`: what a call costs the rollout process itself, whose event loop is the one
that runs out of CPU at high concurrency). Timing goals live here, never in the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time

from graphrl.tools.python_exec import run_python
from graphrl.tools.sandbox_fork import ForkServer
from graphrl.tools.sandbox_host import WARM_SANDBOXES, SandboxPolicy, bubblewrap_works, fork_works
from graphrl.tools.sandbox_pool import SandboxPool

from .client import machine_busy_s as _busy_s  # the machine's busy CPU seconds (all cores)

CODE = "print(1)"


async def _bare() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", CODE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    assert out == b"1\n" and proc.returncode == 0


def _sandboxed(policy: SandboxPolicy | None, warm: bool = False):
    pools: dict[int, SandboxPool | ForkServer] = {}
    served = [0]  # calls the closed pools served warm

    async def call() -> None:
        pol = policy or SandboxPolicy()
        pool = None
        if warm:
            loop = id(asyncio.get_running_loop())
            if loop not in pools:
                pools[loop] = ForkServer(pol) if pol.backend == "fork" else SandboxPool(pol, pol.warm)
            pool = pools[loop]
        res = await run_python(CODE, timeout=10, policy=pol, isolate=policy is not None, warm=pool)
        assert res.ok and res.text == "1\n", res.text

    async def close() -> None:
        for pool in pools.values():
            served[0] += pool.served
            await pool.close()
        pools.clear()

    call.close = close  # type: ignore[attr-defined]
    call.served = served  # type: ignore[attr-defined]
    return call


class TreeCpu:
    """CPU seconds of this process and of everything it starts, from a cpuacct cgroup the process moves
    into (cgroup v1; the sandbox's own cgroups are in the pids and memory hierarchies, so its processes
    stay counted here). `open()` is None where no such group can be made (not root, cgroup v2 only:
    there a call's cgroup would take its processes out of the tree)."""

    ROOTS = ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/cpu,cpuacct")

    def __init__(self, path: str, home: str):
        self.path, self.home = path, home

    @classmethod
    def open(cls) -> TreeCpu | None:
        for root in cls.ROOTS:
            if not os.path.exists(os.path.join(root, "cpuacct.usage")):
                continue
            home = root + cls._current(root)
            path = os.path.join(root, f"graphrl-bench-sandbox-{os.getpid()}")
            try:
                os.mkdir(path)
            except OSError:
                return None
            meter = cls(path, home)
            try:
                meter._join(path)
            except OSError:
                os.rmdir(path)
                return None
            return meter
        return None

    @staticmethod
    def _current(root: str) -> str:
        """This process's group in the cpuacct hierarchy (from /proc/self/cgroup)."""
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, group = line.rstrip("\n").split(":", 2)
                if "cpuacct" in controllers.split(","):
                    return group.rstrip("/")
        return ""

    def _join(self, path: str) -> None:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def seconds(self) -> float:
        with open(os.path.join(self.path, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9

    def close(self) -> None:
        """Back to the group it came from; the group is removed once its last process has left it."""
        try:
            self._join(self.home)
        except OSError:
            return
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError:  # a child still exiting
                time.sleep(0.01)


async def _idle_rate(span: float = 2.0) -> float:
    """The machine's busy CPU seconds per second with nothing of ours running."""
    b0, t0 = _busy_s(), time.perf_counter()
    await asyncio.sleep(span)
    return (_busy_s() - b0) / (time.perf_counter() - t0)


async def _measure(rows, calls: int, gap: float, concurrency: int, idle: float, tree: TreeCpu | None) -> list[tuple]:
    """Per row: (median wall, p90 wall, calls/s at `concurrency`, machine CPU per call, tree CPU per
    call, the calling process's CPU per call). The sequential calls are interleaved -- round k calls every row once, `gap` seconds apart
    -- so a drift in the machine's speed (this VM's CPU time for the same work moves by 10-20% from
    minute to minute) falls on every row alike. A call's CPU is what the meters count from its start
    to the next call's: the gap before the next call holds its aftermath (a warm pool's refill, the
    clean-up), and the tree meter counts nothing of anyone else."""
    for _, call in rows:
        await call()  # warm-up (and bubblewrap's one-time probe; a pool's first sandboxes)
    await asyncio.sleep(0.5)
    walls: list[list[float]] = [[] for _ in rows]
    cpu, own, client = [0.0] * len(rows), [0.0] * len(rows), [0.0] * len(rows)
    meters = lambda: (_busy_s(), tree.seconds() if tree else math.nan, time.perf_counter(), time.process_time())
    last, then = 0, meters()  # the previous call's row and the meters at its start

    def count(now: tuple[float, float, float, float]) -> None:  # the previous call's window, up to `now`
        cpu[last] += now[0] - then[0] - idle * (now[2] - then[2])
        own[last] += now[1] - then[1]
        client[last] += now[3] - then[3]

    for k in range(calls):
        for i, (_, call) in enumerate(rows):
            await asyncio.sleep(gap)
            now = meters()
            if k or i:
                count(now)
            last, then = i, now
            await call()
            walls[i].append(time.perf_counter() - now[2])
    await asyncio.sleep(gap)  # the last call's aftermath
    count(meters())
    out = []
    for i, (_, call) in enumerate(rows):
        t0 = time.perf_counter()
        await asyncio.gather(*(call() for _ in range(concurrency)))
        rate = concurrency / (time.perf_counter() - t0)
        close = getattr(call, "close", None)
        if close is not None:
            await close()
        w = sorted(walls[i])
        share = [x[i] / calls for x in (cpu, own, client)]
        out.append((statistics.median(w), w[math.ceil(0.9 * len(w)) - 1], rate, *share))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--gap", type=float, default=0.2, help="seconds between sequential calls")
    ap.add_argument("--concurrency", type=int, default=16)
    a = ap.parse_args(argv)
    rows = [("bare python -I -c", _bare), ("none (isolate=False)", _sandboxed(None))]
    if fork_works():
        rows += [("fork server", _sandboxed(SandboxPolicy(backend="fork", warm=WARM_SANDBOXES), warm=True))]
        rows += [("fork server strict", _sandboxed(SandboxPolicy(backend="fork", strict=True, warm=1), warm=True))]
    rows += [("launcher", _sandboxed(SandboxPolicy(backend="launcher")))]
    rows += [("launcher strict", _sandboxed(SandboxPolicy(backend="launcher", strict=True)))]
    rows += [("launcher warm", _sandboxed(SandboxPolicy(backend="launcher", warm=WARM_SANDBOXES), warm=True))]
    if bubblewrap_works():
        rows += [("bubblewrap", _sandboxed(SandboxPolicy(backend="bubblewrap")))]
        rows += [("bubblewrap strict", _sandboxed(SandboxPolicy(backend="bubblewrap", strict=True)))]
        rows += [("bubblewrap warm", _sandboxed(SandboxPolicy(backend="bubblewrap", warm=WARM_SANDBOXES), warm=True))]
    idle = asyncio.run(_idle_rate())
    tree = TreeCpu.open()
    try:
        measured = asyncio.run(_measure(rows, a.calls, a.gap, a.concurrency, idle, tree))
        results = [(name, m) for (name, _), m in zip(rows, measured)]
    finally:
        if tree is not None:
            tree.close()
    warm_counts = {
        name: fn.served[0] for name, fn in rows if hasattr(fn, "served") and ("warm" in name or "fork" in name)
    }
    base = results[0][1][0]
    print(
        f"python tool per call: {a.calls} sequential calls of {CODE!r} per backend, the backends interleaved and"
        f" {a.gap:g} s apart, then {a.concurrency} at once"
    )
    head = f"{'backend':<22} {'median ms':>10} {'p90 ms':>8} {'calls/s @' + str(a.concurrency):>13} {'x bare':>7}"
    print(f"{head} {'CPU ms/call':>12} {'x bare':>7} {'tree CPU ms':>12} {'x bare':>7} {'client ms':>10} {'x bare':>7}")
    base_cpu, base_own, base_client = results[0][1][3], results[0][1][4], results[0][1][5]
    for name, (med, p90, rate, cpu, own, client) in results:
        line = f"{name:<22} {med * 1e3:>10.1f} {p90 * 1e3:>8.1f} {rate:>13.1f} {med / base:>7.2f}"
        mine = f"{own * 1e3:>12.2f} {own / base_own:>7.3f}" if tree else f"{'n/a':>12} {'n/a':>7}"
        print(
            f"{line} {cpu * 1e3:>12.1f} {cpu / base_cpu:>7.2f} {mine} {client * 1e3:>10.2f} {client / base_client:>7.3f}"
        )
    print(f"machine idle before the runs: {idle * 1e3:.0f} ms of CPU per second (subtracted from CPU ms/call)")
    if tree is None:
        print("tree CPU: n/a (needs root and a cgroup v1 cpuacct hierarchy)")
    for name, n in warm_counts.items():
        print(f"{name}: {n} of {a.calls + a.concurrency + 1} calls served warm (a started or a forked sandbox)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
