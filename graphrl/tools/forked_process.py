"""One call of the fork server, as graphrl holds it: the forked L0's handle and its pipes' I/O.

Input: graphrl's ends of three of the pipes a fork was made with (the status pipe's read end, the
program's stdin's write end, its stdout+stderr's read end) and the event loop. Output: a
`ForkedProcess`, a `piped_process.PipedProcess` (driven like asyncio's Process, with `exchange()` and
`connect()`) whose end comes on the status pipe.

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

from .piped_process import PipedProcess


class ForkedProcess(PipedProcess):
    """One call's L0 as `run_python` drives it (`piped_process.PipedProcess`: `pid`, `returncode`,
    `wait()`, `exchange()`, `connect()`). It is the server's child, not ours, so its exit code comes on
    the status pipe (b"X<code>\\n"); a pipe that closes without one means it was killed (returncode
    -SIGKILL)."""

    def __init__(self, status_fd: int, stdin_w: int, stdout_r: int, loop: asyncio.AbstractEventLoop):
        super().__init__(stdin_w, stdout_r, loop)
        self._fd = status_fd
        self._pidfd = -1
        self._awaiting_exit = False  # the status pipe closed; the pidfd says when L0 is gone
        self._buf = b""
        self._started: asyncio.Future[None] = loop.create_future()
        os.set_blocking(status_fd, False)
        loop.add_reader(status_fd, self._readable)

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
