"""ToolBox: a tool name + rendered arguments -> a `ToolResult` (observation text), never an exception.

Input: built-in tool names (`python`, `retrieve`) or user `module:function` references (sync
functions run in a worker thread, async ones are awaited), arguments, a timeout, a truncation limit.
Output: `ToolResult(text, ok, error, data)`; failures (timeouts, crashes, bad arguments) become
observations with ok=False, so the rollout goes on and the graph can route on them.

Invariant: nothing here blocks the event loop; observations are cut to `max_chars` (middle cut).
HTTP tools share one keep-alive session per event loop (`LoopSessions`: closed when its loop shuts
down), owned by the ToolBox; `close()` ends the running loop's.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from ..engines.loop_sessions import LoopSessions
from ..runtime.scope import cut
from ..runtime.services import ToolResult
from ..spec.imports import ImportProblem, resolve_callable
from .python_exec import run_python
from .retrieval import retrieve


class ToolBox:
    def __init__(self, search: list[Path] | None = None):
        self._search = list(search or [])
        self._fns: dict[str, Callable[..., Any] | ImportProblem] = {}
        # keep-alive shorter than common servers' 5 s, so an idle socket the server closed is not reused
        self._http = LoopSessions(
            lambda: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=4.0))
        )

    async def close(self) -> None:
        """Close the HTTP session of this event loop's tools (no-op if none was opened)."""
        await self._http.close()

    def _user(self, ref: str) -> Callable[..., Any] | ImportProblem:
        if ref not in self._fns:
            self._fns[ref] = resolve_callable(ref, self._search)
        return self._fns[ref]

    async def call(self, tool: str, args: dict[str, Any], *, timeout: float, max_chars: int | None) -> ToolResult:
        try:
            res = await asyncio.wait_for(self._dispatch(tool, args, timeout), timeout + 1.0)
        except asyncio.TimeoutError:
            res = ToolResult(f"[tool {tool} timed out after {timeout:g} s]", ok=False, error="timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's crash is an observation, not the rollout's end
            res = ToolResult(
                f"[tool {tool} failed: {type(exc).__name__}: {exc}]", ok=False, error=f"{type(exc).__name__}: {exc}"
            )
        return ToolResult(cut(res.text, max_chars), res.ok, res.error, res.data)

    async def _dispatch(self, tool: str, args: dict[str, Any], timeout: float) -> ToolResult:
        if tool == "python":
            return await run_python(str(args.get("code", "")), timeout=timeout, stdin=args.get("stdin"))
        if tool == "retrieve":
            return await retrieve(
                args["url"],
                str(args["query"]),
                int(args.get("topk", 3)),
                timeout=timeout,
                session=await self._http.get(),
            )
        fn = self._user(tool)
        if isinstance(fn, ImportProblem):
            return ToolResult(f"[tool {tool} unavailable: {fn.message}]", ok=False, error=fn.message)
        if inspect.iscoroutinefunction(fn):
            value = await fn(**args)
        else:
            value = await asyncio.to_thread(fn, **args)
        return _as_result(value)


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    if isinstance(value, dict):
        text = value.get("text")
        return ToolResult(
            str(text) if text is not None else json.dumps(value, ensure_ascii=False, default=str),
            bool(value.get("ok", True)),
            value.get("error"),
            value,
        )
    return ToolResult(json.dumps(value, ensure_ascii=False, default=str))
