"""One aiohttp session per event loop, closed when that loop shuts down.

Input: a factory that makes a `aiohttp.ClientSession` (called inside the running loop).
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
  shutdown are forgotten (the loop is gone; nothing can run there any more).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable

import aiohttp

__all__ = ["LoopSessions"]


async def _close_at_loop_end(session: aiohttp.ClientSession) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        if not session.closed:
            await session.close()


class LoopSessions:
    def __init__(self, factory: Callable[[], aiohttp.ClientSession]):
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[aiohttp.ClientSession, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        self.opened = 0  # sessions made so far (one per loop that used this object)

    def open_sessions(self) -> int:
        """How many sessions are open now (at most one per live loop)."""
        return sum(1 for session, _ in list(self._by_loop.values()) if not session.closed)

    async def get(self) -> aiohttp.ClientSession:
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
            self._by_loop.pop(loop, None)
