"""One call of the fork server, as graphrl holds it: the forked L0's handle and its pipes' I/O.

Input: graphrl's ends of three of the pipes a fork was made with (the status pipe's read end, the
program's stdin's write end, its stdout+stderr's read end) and the event loop. Output: a
`ForkedProcess` that `python_exec.run_python` and `dispose` drive like asyncio's Process (`pid`,
`returncode`, `wait()`), plus `exchange()`, a one-shot call's whole I/O on the raw pipes, and
`connect()`, stdin and stdout streams for a session.

Invariants: the status pipe says b"<pid>\\n" when L0 exists and b"X<code>\\n" when it ends; the
process counts as ended once L0 is gone (its pidfd readable), not when the pipe closes, a moment
earlier; it is stopped only through the pidfd, never by a pid that could be another process's by
then; `close()` closes every descriptor it holds and unregisters every callback, at any moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal


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
                loop.remove_reader(stdout)
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
            loop.add_writer(stdin, write)
        loop.add_reader(stdout, read)
        timer = loop.call_later(timeout, end, "timeout")
        try:
            why = await ended
        finally:  # our ends closed: a program still writing is being stopped by the caller
            timer.cancel()
            close_stdin()
            self._close_pipe(stdout)
        return bytes(out), why

    def _close_pipe(self, fd: int) -> None:
        """Close one of our raw pipe ends, first taking it out of the loop (a no-op where `exchange`
        never registered it): the loop never watches a descriptor number that is closed."""
        if fd in self._pipes:
            self._pipes.remove(fd)
            self._loop.remove_reader(fd)
            self._loop.remove_writer(fd)
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
                self._close_status()
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

    def _close_status(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _finish(self) -> None:
        self._close_status()
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
        for fd in list(self._pipes):
            self._close_pipe(fd)
        self._finish()
