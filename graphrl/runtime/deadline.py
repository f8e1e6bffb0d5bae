"""Deadlines for awaits: `await within(awaitable, timeout)` -> its result, or TimeoutError at the deadline.

Why not `asyncio.wait_for` alone: up to Python 3.11 it runs the awaitable in a task of its own and,
when the caller is cancelled in the loop iteration in which that task finishes, returns the result
and drops the cancellation (CPython gh-86296, fixed in 3.12). A rollout deadline that fires just as a
tool call returns (easily, after any synchronous step longer than the time left) is then lost: the
rollout runs on, and the outer `wait_for` waits for it -- here, for a hung engine call. From 3.11,
`asyncio.timeout` cancels the awaiting task itself, with no task in between, and its exit tells its
own expiry from a cancellation that came from outside; 3.10 keeps `wait_for`.

Invariants: TimeoutError (`asyncio.TimeoutError`, the same class since 3.11) at the deadline, after the
awaitable's own clean-up ran; a cancellation from outside propagates as CancelledError; `timeout`
None waits without a deadline.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    if timeout is None:
        return await awaitable
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(timeout):
            return await awaitable
    return await asyncio.wait_for(awaitable, timeout)  # pragma: no cover - Python 3.10
