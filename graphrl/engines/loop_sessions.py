"""One aiohttp session (or any closeable per-loop resource) per event loop, closed when that loop
shuts down.

Input: a factory that makes a `aiohttp.ClientSession` (called inside the running loop), or any
object with `closed` and an async `close()` (the python tool's warm sandbox pools).
Output: `await sessions.get()` -> the running loop's session, made on first use.

Why: an engine or tool box is created once but may be called from several event loops (slime's
rollout loop, fully_async_rollout's worker thread, a test's `asyncio.run` per call). A session
belongs to the loop it was made in; switching one slot between loops made a new session at each
switch and never closed the old ones.

Invariants:
- at most one open session per live loop; a loop's session is closed when the loop shuts down
  its async generators (`asyncio.run` does, before closing the loop): each session is watched by a
  small async generator registered with its loop's asyncgen hooks, whose `finally` closes it;
- `close()` closes the running loop's session now; sessions of loops already closed without that
  shutdown are forgotten (the loop is gone; nothing can run there any more), after a synchronous
  `abandon()` where the resource has one (a pool's processes are killed without their loop).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["LoopSessions"]


class Closeable(Protocol):
    @property
    def closed(self) -> bool: ...

    async def close(self) -> None: ...


T = TypeVar("T", bound=Closeable)


async def _close_at_loop_end(session: Closeable) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        if not session.closed:
            await session.close()


class LoopSessions(Generic[T]):
    def __init__(self, factory: Callable[[], T]):
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[T, AsyncGenerator[None, None]]] = (
            weakref.WeakKeyDictionary()
        )
        self.opened = 0  # sessions made so far (one per loop that used this object)

    def open_sessions(self) -> int:
        """How many sessions are open now (at most one per live loop)."""
        return sum(1 for session, _ in list(self._by_loop.values()) if not session.closed)

    async def get(self) -> T:
        loop = asyncio.get_running_loop()
        entry = self._by_loop.get(loop)
        if entry is not None and not entry[0].closed:
            return entry[0]
        session = self._factory()
        watcher = _close_at_loop_end(session)
        self._by_loop[loop] = (session, watcher)
        self.opened += 1
        await watcher.asend(None)  # first step: the loop's asyncgen hooks now close it at shutdown
        return session

    async def close(self) -> None:
        """Close the running loop's session; forget the sessions of loops already closed."""
        entry = self._by_loop.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            session, watcher = entry
            await watcher.aclose()  # runs its finally: closes the session
            if not session.closed:
                await session.close()
        for loop in [lp for lp in list(self._by_loop) if lp.is_closed()]:
            gone, _ = self._by_loop.pop(loop)
            abandon = getattr(gone, "abandon", None)
            if abandon is not None and not gone.closed:
                abandon()
