"""Warm sandboxes: python tool calls that skip the sandbox's start-up, with the same guarantees.

Input: a `SandboxPolicy` and a size. Output: `take(policy)` hands out a sandbox that was started
ahead of time (launcher or bubblewrap, namespaces, mounts, cgroups, limits, seccomp all in place)
and waits in `sandbox_waiter.WAITER` (a fresh `python -I main.py`, already started) for its code; the
call then runs it in that interpreter as `__main__`, as a cold call would run it in its own. None when
none is ready (the caller starts one itself).

Invariants: a warm sandbox serves one call and is never reused (no state crosses calls); only calls
whose policy equals the pool's are served; at most `size` are ready or starting; they belong to the
event loop that started them (`ToolBox` keeps one pool per loop with `LoopSessions`, which closes
it when that loop shuts down) and `close()` stops and removes every one of them, ready or starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Awaitable, Callable

from ..runtime.deadline import within
from .python_exec import Launched, await_report, dispose, launch
from .sandbox_host import SandboxPolicy, remove_cgroup
from .sandbox_waiter import WAITER

REPORT_WAIT_S = 30.0  # a launcher reports within milliseconds; one that does not is given up
POOL_CPU_S = 3600  # a waiting sandbox uses no CPU; the call lowers this to its own limit before it runs


class SandboxPool:
    """`start`: how one sandbox is made ahead of time (default: a sandbox started with `launch`
    running `WAITER`, ready once reported; `sandbox_fork.ForkServer` passes a fork of its server);
    None when none could be made."""

    def __init__(self, policy: SandboxPolicy, size: int, start: Callable[[], Awaitable[Launched | None]] | None = None):
        self.policy = policy
        self.size = size
        self._start_one = start or self._launch_waiter
        self._ready: list[Launched] = []
        self._starting: set[asyncio.Task] = set()
        self._closed = False
        self.served = 0  # calls that got a warm sandbox
        self.missed = 0  # calls that found none ready

    @property
    def closed(self) -> bool:
        return self._closed

    async def take(self, policy: SandboxPolicy) -> Launched | None:
        if self._closed or self.size <= 0 or policy != self.policy:
            return None
        run = None
        while self._ready and run is None:
            candidate = self._ready.pop(0)
            if candidate.proc.returncode is None:
                run = candidate
            else:  # died while waiting (killed from outside): never hand it out
                await dispose(candidate)
        if run is None:
            self.missed += 1
            if not self._ready and not self._starting and self.served + self.missed == 1:
                self._refill()  # the very first call: start filling now
        else:
            self.served += 1
        return run

    def refill(self) -> None:
        """Top the pool up to its size; called when a call has finished, so that starting the
        replacements never competes with the call itself for the CPU."""
        self._refill()

    def _refill(self) -> None:
        while not self._closed and len(self._ready) + len(self._starting) < self.size:
            task = asyncio.create_task(self._start())
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _launch_waiter(self) -> Launched | None:
        try:
            run = await launch(WAITER, cpu_s=POOL_CPU_S, policy=self.policy)
        except (OSError, ValueError):
            return None  # the next call starts its own sandbox and reports what failed
        try:  # ready once its launcher has reported (a call taking it earlier would find no report)
            report = await within(await_report(run), REPORT_WAIT_S)
        except asyncio.CancelledError:  # close()
            await dispose(run)
            raise
        except (asyncio.TimeoutError, TimeoutError, OSError):  # a launcher that never reported
            await dispose(run)
            return None
        if not report.get("launcher") or run.proc.returncode is not None:
            await dispose(run)  # the launcher failed: the next call starts its own and reports why
            return None
        return run

    async def _start(self) -> None:
        run = await self._start_one()
        if run is None:
            return
        if self._closed:
            await dispose(run)
        else:
            self._ready.append(run)

    def abandon(self) -> None:
        """Stop every warm sandbox without an event loop (its own loop is gone or elsewhere): kill the
        process groups; their work directories and cgroups go with the next sweep or close here."""
        self._closed = True
        ready, self._ready = self._ready, []
        for run in ready:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.close()  # our pipe ends (the loop is closed: nothing to unregister)
            if run.report_r >= 0:
                os.close(run.report_r)
                run.report_r = -1
            shutil.rmtree(run.workdir, ignore_errors=True)
            for group in run.cgroups:
                remove_cgroup(group["path"])

    async def close(self) -> None:
        """Stop every warm sandbox (and those still starting); later `take`s get None."""
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        for task in list(self._starting):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        ready, self._ready = self._ready, []
        for run in ready:
            await dispose(run)
