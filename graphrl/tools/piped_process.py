"""A sandboxed program as graphrl holds it: a process handle and graphrl's raw ends of its pipes.

Input: graphrl's ends of the program's stdin (write) and stdout+stderr (read) pipes, the event loop,
and either a `subprocess.Popen` child (`SpawnedProcess`: a call started cold, a pool's waiting
sandbox) or, in `forked_process`, a fork server's status pipe. Output: an object that
`python_exec.run_python`, `dispose` and the session drive like asyncio's Process (`pid`,
`returncode`, `wait()`), plus `exchange()`, a one-shot call's whole I/O on the raw pipes, and
`connect()`, stdin and stdout streams for a session.

Invariants: no asyncio subprocess transport is involved. (One still being set up when `asyncio.run`
ends -- it cancels every task -- never finishes closing on Python 3.11, so `asyncio.run` never
returned; `Popen` is one system call on the loop, as asyncio's own start is, with nothing to cancel
half-way.) `SpawnedProcess` counts as ended once its process has exited, seen through a pidfd (or a
timer where the kernel has none) and reaped by `Popen.poll`, never by a pid that could be another
process's; `close()` closes every descriptor it holds and unregisters every callback, at any moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess


class PipedProcess:
    """What every sandboxed program's handle shares: the raw pipes, `exchange`, `connect`, `wait`.
    Subclasses say when the process has ended (`_finish` sets `returncode` and `_done`)."""

    def __init__(self, stdin_w: int, stdout_r: int, loop: asyncio.AbstractEventLoop):
        self.pid = 0
        self.returncode: int | None = None
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self._out: asyncio.ReadTransport | None = None
        self._pipes = [stdin_w, stdout_r]  # our raw ends until `connect` or `exchange` closes them
        self._loop = loop
        self._done: asyncio.Future[None] = loop.create_future()

    def send_now(self, data: bytes) -> None:
        """Write a few bytes to the program's stdin at once (blocking: they fit in the pipe's buffer)."""
        stdin = self._pipes[0]
        os.write(stdin, data)

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

    async def wait(self) -> int:
        await asyncio.shield(self._done)
        assert self.returncode is not None
        return self.returncode

    def close(self) -> None:
        """Stop reading: close the pipes (and whatever tells the process's end: it counts as finished)."""
        if self._out is not None:
            self._out.close()
        if self.stdin is not None:
            self.stdin.close()
        for fd in list(self._pipes):
            self._close_pipe(fd)
        self._finish()

    def _finish(self) -> None:
        raise NotImplementedError


class SpawnedProcess(PipedProcess):
    """A program started by `spawn`: this process's child. Its exit is seen through a pidfd (readable
    once it has exited) and reaped by `Popen.poll`; a kernel without pidfds is polled on a timer."""

    def __init__(self, popen: subprocess.Popen, stdin_w: int, stdout_r: int, loop: asyncio.AbstractEventLoop):
        super().__init__(stdin_w, stdout_r, loop)
        self._popen = popen
        self.pid = popen.pid
        self._timer: asyncio.TimerHandle | None = None
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except OSError:  # no pidfds (Linux < 5.3), or it is gone already (reaped: impossible, ours)
            self._pidfd = -1
            self._poll(0.001)
        else:
            loop.add_reader(self._pidfd, self._exited)

    def reap(self, timeout: float) -> None:
        """Without an event loop: wait up to `timeout` s for it to end (after a kill)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def _poll(self, delay: float) -> None:
        self._timer = None
        if self._popen.poll() is not None:
            self._finish()
        else:
            self._timer = self._loop.call_later(delay, self._poll, min(2 * delay, 0.05))

    def _exited(self) -> None:
        if self._popen.poll() is not None:
            self._finish()

    def _finish(self) -> None:
        if self._pidfd >= 0:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.returncode is None:  # closed before it exited (a kill that did not take): reaped later
            code = self._popen.poll()
            self.returncode = -signal.SIGKILL if code is None else code
        if not self._done.done():
            self._done.set_result(None)


def spawn(
    argv: list[str], cwd: str, env: dict[str, str], *, stderr: int | None, pass_fds: tuple[int, ...]
) -> SpawnedProcess:
    """Start `argv` in its own session with pipes for stdin and stdout; stderr joins stdout where
    `stderr` is None, else goes to that descriptor. Never half-started: it returns the handle, or
    raises with nothing left open."""
    loop = asyncio.get_running_loop()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=in_r,
            stdout=out_w,
            stderr=out_w if stderr is None else stderr,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except BaseException:
        os.close(in_w)
        os.close(out_r)
        raise
    finally:
        os.close(in_r)
        os.close(out_w)
    try:
        return SpawnedProcess(popen, in_w, out_r, loop)
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
        os.close(in_w)
        os.close(out_r)
        raise
