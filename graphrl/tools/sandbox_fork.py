"""The python tool's fork server, host side: each call's sandbox forked from a waiting interpreter.

Input: a `SandboxPolicy`. Output: `ForkServer.take(policy)` -> a `python_exec.Launched` whose
process is a fresh fork of a server interpreter (`_sandbox_zygote`), isolated by the launcher's own
steps (cgroups, namespaces, mounts, limits, capabilities, seccomp: the "launcher" backend's
sandbox, docs/sandbox.md) and waiting in `python_exec.WAITER` for its code, as a warm sandbox
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
import re
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..runtime.deadline import within
from ..runtime.services import ToolResult
from .python_exec import _ENV, WAITER, Launched, _remove_cgroup, await_report, call_config, dispose, run_python
from .sandbox_host import Recycler, SandboxPolicy, make_workdir, resolve_backend, strict_python
from .sandbox_pool import POOL_CPU_S, SandboxPool

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


class ForkedProcess:
    """One call's L0 as `run_python` drives it: `pid` (its session and process group), `returncode`
    and `wait()`, like asyncio's Process, and `exchange()`, a one-shot call's whole I/O on the raw
    pipes (no transports, tasks or streams: a forked call's client side costs what its system calls
    do); `connect()` gives it `stdin` and `stdout` streams instead (a session's). It is the server's
    child, not ours, so its exit code comes on the status pipe (b"X<code>\\n"); a pipe that closes
    without one means it was killed (returncode -SIGKILL)."""

    def __init__(self, status_fd: int, stdin_w: int, stdout_r: int, loop: asyncio.AbstractEventLoop):
        self.pid = 0
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self._out: asyncio.ReadTransport | None = None
        self._pipes = [stdin_w, stdout_r]  # our raw ends until `connect` or `exchange` closes them
        self._watched: list[tuple[int, bool]] = []  # (fd, is_writer) registered with the loop by `exchange`
        self._fd = status_fd
        self._pidfd = -1
        self._awaiting_exit = False  # the status pipe closed; the pidfd says when L0 is gone
        self._buf = b""
        self._loop = loop
        self._started: asyncio.Future[None] = loop.create_future()
        self._done: asyncio.Future[None] = loop.create_future()
        self._transport = self  # what `python_exec._stop` closes when something still holds the output
        os.set_blocking(status_fd, False)
        loop.add_reader(status_fd, self._readable)

    async def connect(self) -> None:
        """Stream the pipes through the loop (the transports then own them)."""
        loop = self._loop
        stdin, stdout = (os.fdopen(fd, mode, 0) for fd, mode in zip(self._pipes, ("wb", "rb")))
        self._pipes = []
        self.stdout = reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
        try:
            self._out, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), stdout)
        except BaseException:
            stdin.close()
            stdout.close()
            raise
        try:
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), stdin
            )
        except BaseException:
            stdin.close()
            raise
        self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)

    async def exchange(self, data: bytes, cap: int, timeout: float) -> tuple[bytes, str | None]:
        """Write `data` to the program's stdin, then close it; read its output to end of file, keeping the
        first `cap` bytes; wait for its exit. Returns (output, None) once it exited, (output, "output
        limit") as soon as it wrote more than `cap`, (output, "timeout") after `timeout` s; in the last two
        it may still run (the caller stops it)."""
        loop = self._loop
        stdin, stdout = self._pipes
        out = bytearray()
        total = 0
        ended: asyncio.Future[str | None] = loop.create_future()
        left = memoryview(data)

        def end(why: str | None) -> None:
            if not ended.done():
                ended.set_result(why)

        def close_stdin() -> None:
            nonlocal stdin
            if stdin >= 0:
                self._unwatch(stdin)
                self._close_pipe(stdin)
                stdin = -1

        def write() -> None:
            nonlocal left
            try:
                while left:
                    left = left[os.write(stdin, left) :]
            except BlockingIOError:
                return
            except OSError:  # the program closed its stdin, or exited: what is left is not read
                pass
            close_stdin()

        def read() -> None:
            nonlocal total
            try:
                chunk = os.read(stdout, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # every copy of the write end closed: the program and all it started are done
                self._unwatch(stdout)
                if self._done.done():
                    end(None)
                else:
                    self._done.add_done_callback(lambda _: end(None))
                return
            total += len(chunk)
            if len(out) < cap:
                out.extend(chunk[: cap - len(out)])
            if total > cap:
                end("output limit")

        os.set_blocking(stdin, False)
        os.set_blocking(stdout, False)
        write()
        if stdin >= 0:
            self._watch(stdin, True, write)
        self._watch(stdout, False, read)
        timer = loop.call_later(timeout, end, "timeout")
        try:
            why = await ended
        finally:  # our ends closed: a program still writing is being stopped by the caller
            timer.cancel()
            close_stdin()
            self._unwatch(stdout)
            self._close_pipe(stdout)
        return bytes(out), why

    def _watch(self, fd: int, writer: bool, callback: Callable[[], None]) -> None:
        (self._loop.add_writer if writer else self._loop.add_reader)(fd, callback)
        self._watched.append((fd, writer))

    def _unwatch(self, fd: int) -> None:
        for entry in [w for w in self._watched if w[0] == fd]:
            (self._loop.remove_writer if entry[1] else self._loop.remove_reader)(fd)
            self._watched.remove(entry)

    def _close_pipe(self, fd: int) -> None:
        if fd in self._pipes:
            self._pipes.remove(fd)
            os.close(fd)

    async def started(self) -> bool:
        """Wait for the pid line; False when the status pipe closed first (nothing was started)."""
        await asyncio.shield(self._started)
        return self.pid > 0

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, 256)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._buf += chunk
        if not self._started.done() and (b"\n" in self._buf or not chunk):
            line = self._buf.split(b"\n", 1)[0]
            self.pid = int(line) if line.isdigit() else 0
            if self.pid and chunk and b"X" not in self._buf:  # L0 is still running: a handle on it
                with contextlib.suppress(OSError):
                    self._pidfd = os.pidfd_open(self.pid)
            self._started.set_result(None)
        if not chunk:
            if self._pidfd >= 0 and not self._awaiting_exit:  # L0 closed the pipe as it exits: wait until it
                self._awaiting_exit = True  # is gone, so its cgroups are empty when the call is disposed of
                self._loop.remove_reader(self._fd)
                os.close(self._fd)
                self._fd = -1
                self._loop.add_reader(self._pidfd, self._finish)
                return
            self._finish()

    def kill_sandbox(self) -> None:
        """SIGKILL L0 through its pidfd (the server's children are reaped by the kernel at once, so
        its pid could be another process's by the time graphrl sees it end); L1 dies with it (its
        parent-death signal) and, as pid 1 of the call's namespace, takes every process of the call."""
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _finish(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        if self._pidfd >= 0:
            if self._awaiting_exit:
                self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self.returncode is None:
            found = re.search(rb"\nX(\d+)\n", self._buf)
            self.returncode = int(found.group(1)) if found else -signal.SIGKILL
        for fut in (self._started, self._done):
            if not fut.done():
                fut.set_result(None)

    async def wait(self) -> int:
        await asyncio.shield(self._done)
        assert self.returncode is not None
        return self.returncode

    def close(self) -> None:
        """Stop reading: close the pipes and the status pipe (the process counts as finished)."""
        if self._out is not None:
            self._out.close()
        if self.stdin is not None:
            self.stdin.close()
        for fd, _ in list(self._watched):
            self._unwatch(fd)
        for fd in list(self._pipes):
            self._close_pipe(fd)
        self._finish()


class _Server:
    """One server interpreter (`_sandbox_zygote`) for one policy."""

    def __init__(self, policy: SandboxPolicy):
        self.policy = policy
        self.proc: asyncio.subprocess.Process | None = None
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
            self.proc = await asyncio.create_subprocess_exec(
                self.python,
                "-I",
                "main.py",
                cwd=self.home,
                env=env,
                stdin=asyncio.subprocess.PIPE,  # its std streams are pipes, as a call's are
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
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
            run = Launched(proc, workdir, cgroups, report_r, self.policy, recycle=self.recycler)  # type: ignore[arg-type]
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
