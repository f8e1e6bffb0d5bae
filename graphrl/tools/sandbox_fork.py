"""The python tool's fork server, host side: each call's sandbox forked from a waiting interpreter.

Input: a `SandboxPolicy`. Output: `ForkServer.take(policy)` -> a `python_exec.Launched` whose
process is a fresh fork of a server interpreter (`_sandbox_zygote`), isolated by the launcher's own
steps (cgroups, namespaces, mounts, limits, capabilities, seccomp: the "launcher" backend's
sandbox, docs/sandbox.md) and waiting in `sandbox_waiter.WAITER` for its code, as a warm sandbox
does. A call then skips both interpreter starts (the launcher's and the code's) and the sandbox's
set-up is a few system calls: that is what makes it cheaper than a bare `python -I -c` subprocess.

Invariants: one server interpreter per policy, started on first use, belonging to the event loop
that started it (`ToolBox` keeps one `ForkServer` per loop); each fork serves one call; the server
never runs user code; `close()` ends the servers and `abandon()` kills them without a loop; a call
the server cannot serve (it died, or could not fork) gets None and starts cold.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import os
import shutil
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..runtime.deadline import within
from ..runtime.services import ToolResult
from .forked_process import ForkedProcess
from .piped_process import SpawnedProcess, spawn
from .python_exec import _ENV, Launched, _remove_cgroup, await_report, call_config, dispose, run_python
from .sandbox_host import Recycler, SandboxPolicy, make_workdir, resolve_backend, strict_python
from .sandbox_pool import POOL_CPU_S, SandboxPool
from .sandbox_waiter import WAITER

SERVER_START_S = 30.0  # a server that has not forked one call by then is given up
_TOOLS = str(Path(__file__).parent)


def zygote_source(ctl_fd: int, parent_pid: int) -> str:
    """The server's main.py: it records the interpreter's state as started, serves forks, and in each
    call's process falls through to the waiter (`WAITER`), at module level as in a warm sandbox."""
    return (
        "def _zygote():\n"
        "    import sys\n"
        "    before = frozenset(sys.modules), list(sys.path), frozenset(sys.path_importer_cache)\n"
        f"    sys.path.append({_TOOLS!r})\n"
        "    import _sandbox_zygote\n"
        f"    _sandbox_zygote.serve({ctl_fd}, {parent_pid}, before, globals())\n"
        "_zygote()\n" + WAITER
    )


class _Server:
    """One server interpreter (`_sandbox_zygote`) for one policy."""

    def __init__(self, policy: SandboxPolicy):
        self.policy = policy
        self.proc: SpawnedProcess | None = None
        self.sock: socket.socket | None = None
        self.home = ""
        self.python = strict_python() if policy.strict else sys.executable
        self._send_lock = asyncio.Lock()
        self.recycler = Recycler(policy)  # each call's work directory and cgroups, used again once left empty

    async def start(self) -> None:
        self.home = make_workdir()  # named after this process: a killed run's is swept like a call's
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            Path(self.home, "main.py").write_text(zygote_source(theirs.fileno(), os.getpid()), encoding="utf-8")
            env = {**_ENV, "HOME": self.home, "TMPDIR": self.home}
            # its std streams are pipes, as a call's are (this side holds its ends and never reads: the
            # server writes nothing); `spawn`, not asyncio's subprocess transport (`piped_process`)
            self.proc = spawn([self.python, "-I", "main.py"], self.home, env, stderr=None, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours

    @property
    def alive(self) -> bool:
        """Started, not exited, and its end of the socket still open: the server never writes, so a
        peek that finds data or end of file means it is gone. (Not `select()`: a rollout process has
        more than 1,024 files open at high concurrency, and select refuses such descriptors.)"""
        if self.proc is None or self.proc.returncode is not None or self.sock is None:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True  # nothing to read: the server is there, waiting
        except OSError:
            return False
        return False

    async def fork(self) -> Launched | None:
        """One call's sandbox, reported and waiting for its code; None when the server made no fork.
        On an error everything of this fork is stopped and removed, and the error raised (the caller
        asks `alive` whether the server itself is gone)."""
        loop = asyncio.get_running_loop()
        workdir, cgroups, raw = "", list[dict[str, str]](), list[int]()
        proc: ForkedProcess | None = None
        run: Launched | None = None
        try:
            workdir, cgroups = self.recycler.take()
            for _ in range(4):
                raw.extend(os.pipe())
            stdin_r, stdin_w, out_r, out_w, report_r, report_w, status_r, status_w = raw
            theirs = (stdin_r, out_w, report_w, status_w)
            proc = ForkedProcess(status_r, stdin_w, out_r, loop)
            run = Launched(proc, workdir, cgroups, report_r, self.policy, recycle=self.recycler)
            raw = list(theirs)  # the others belong to `proc` and `run` now
            try:
                cfg = call_config(
                    "fork", self.python, workdir, self.policy, cpu_s=POOL_CPU_S, cgroups=cgroups, script=None
                )
                await within(self._send(marshal.dumps(cfg), theirs), SERVER_START_S)
            finally:
                for fd in raw:
                    os.close(fd)
                raw = []
            if not await within(proc.started(), SERVER_START_S):  # the server made no fork
                await self._discard(run, proc, workdir, cgroups)
                return None
            report = await within(await_report(run), SERVER_START_S)
        except BaseException:
            for fd in raw:
                os.close(fd)
            await self._discard(run, proc, workdir, cgroups)
            raise
        if not report.get("launcher") or proc.returncode is not None:
            await self._discard(run, proc, workdir, cgroups)
            return None
        return run

    @staticmethod
    async def _discard(
        run: Launched | None, proc: ForkedProcess | None, workdir: str, cgroups: list[dict[str, str]]
    ) -> None:
        if run is not None and proc is not None and proc.pid:
            await dispose(run)  # stops the fork (through its pidfd, and its cgroups), removes the rest
        else:
            if run is not None and run.report_r >= 0:
                os.close(run.report_r)
                run.report_r = -1
            shutil.rmtree(workdir, ignore_errors=True)
            for group in cgroups:
                await _remove_cgroup(group["path"])
        if proc is not None:
            proc.close()

    async def _send(self, data: bytes, fds: tuple[int, ...]) -> None:
        """One message to the server, calls taking turns (one writer waits on the socket at a time)."""
        async with self._send_lock:
            sock, loop = self.sock, asyncio.get_running_loop()
            if sock is None:
                raise BrokenPipeError("the fork server is closed")
            fd = sock.fileno()
            while True:
                try:
                    socket.send_fds(sock, [data], list(fds))
                    return
                except BlockingIOError:
                    ready: asyncio.Future[None] = loop.create_future()

                    def writable() -> None:
                        if not ready.done():
                            ready.set_result(None)

                    loop.add_writer(fd, writable)
                    try:
                        await ready
                    finally:
                        loop.remove_writer(fd)

    async def close(self) -> None:
        if self.sock is not None:
            self.sock.close()  # the server exits at end of file
            self.sock = None
        if self.proc is not None and self.proc.returncode is None:
            try:
                await asyncio.wait_for(self.proc.wait(), 2.0)
            except asyncio.TimeoutError:
                self.kill()
                await self.proc.wait()
        if self.proc is not None:
            self.proc.close()
        shutil.rmtree(self.home, ignore_errors=True)
        await asyncio.to_thread(self.recycler.close)  # a cgroup still being left waits for it, off the loop

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:  # not reaped: its pid is still its own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)


class ForkServer:
    """A `python_exec.WarmSource`: every call's sandbox forked from a server of its policy. Up to
    `policy.warm` forks of its own policy are made ahead of time (a `SandboxPool` of forks, refilled
    after each call), so a call also skips the sandbox's set-up latency (joining a cgroup waits for
    the kernel: 5-20 ms on the development VM); a call that finds none ready forks its own."""

    def __init__(self, policy: SandboxPolicy):
        self.policy = policy
        self._servers: dict[SandboxPolicy, _Server] = {}
        self._lock = asyncio.Lock()
        self._ahead = SandboxPool(policy, policy.warm, start=lambda: self._fork(policy))
        self._closed = False
        self.served = 0  # calls that got a forked sandbox
        self.missed = 0  # calls that started cold (no server)

    @property
    def closed(self) -> bool:
        return self._closed

    async def take(self, policy: SandboxPolicy) -> Launched | None:
        if self._closed:
            return None
        run = await self._ahead.take(policy)
        if run is None:
            run = await self._fork(policy)
        if run is None:
            self.missed += 1
        else:
            self.served += 1
        return run

    async def _fork(self, policy: SandboxPolicy) -> Launched | None:
        server = await self._server(policy)
        if server is None:
            return None
        try:
            return await server.fork()
        except (OSError, asyncio.TimeoutError, TimeoutError):  # this call starts cold
            if not server.alive:  # the server is gone (one failed fork never retires a live one)
                await server.close()
            return None

    async def _server(self, policy: SandboxPolicy) -> _Server | None:
        async with self._lock:
            server = self._servers.get(policy)
            if server is not None and server.alive:
                return server
            if server is not None:
                await server.close()
            server = _Server(policy)
            try:
                await server.start()
            except OSError:
                return None
            if self._closed:
                await server.close()
                return None
            self._servers[policy] = server
            return server

    def refill(self) -> None:
        """Fork up to `policy.warm` sandboxes ahead; called when a call has finished, so that the
        forks never compete with the call itself for the CPU."""
        self._ahead.refill()

    async def close(self) -> None:
        self._closed = True
        await self._ahead.close()
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            await server.close()

    def abandon(self) -> None:
        """Kill the servers and the forks made ahead without an event loop."""
        self._closed = True
        self._ahead.abandon()
        servers, self._servers = list(self._servers.values()), {}
        for server in servers:
            server.kill()
            if server.sock is not None:
                server.sock.close()
            if server.proc is not None:
                server.proc.reap(1.0)
                server.proc.close()
            shutil.rmtree(server.home, ignore_errors=True)
            server.recycler.close()


async def run_once(code: str, *, timeout: float = 30.0, policy: SandboxPolicy, **kw: Any) -> ToolResult:
    """One call through a fork server of its own (started and closed around it): a lone call, a test."""
    server = ForkServer(policy)
    try:
        return await run_python(code, timeout=timeout, policy=policy, warm=server, **kw)
    finally:
        await server.close()


def sandbox_report(timeout: float = 10.0, policy: SandboxPolicy | None = None) -> dict:
    """What the sandbox guarantees on this machine now: the report of one trivial run, through the
    fork server where the policy resolves to it (as `ToolBox` would run it)."""
    policy = policy or SandboxPolicy()
    if resolve_backend(policy) == "fork":
        res = asyncio.run(run_once("pass", timeout=timeout, policy=replace(policy, backend="fork")))
    else:
        res = asyncio.run(run_python("pass", timeout=timeout, policy=policy))
    return res.data["sandbox"]
