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
import contextlib
import inspect
import json
import threading
import weakref
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import aiohttp

from ..engines.loop_sessions import LoopSessions
from ..runtime import environment
from ..runtime.deadline import within
from ..runtime.environment import environment_of, with_env
from ..runtime.scope import cut
from ..runtime.services import RolloutResources, ToolResult
from ..spec.builtins import TOOL_FIELDS
from ..spec.imports import ImportProblem, resolve_callable
from .python_exec import run_python
from .python_session import PythonSession
from .retrieval import retrieve
from .sandbox_fork import ForkServer
from .sandbox_host import SandboxPolicy, fork_works, resolve_backend, sweep_leftovers
from .sandbox_pool import SandboxPool


class ToolBox:
    """`sandbox`: how `python` calls are isolated (the caller reads it at its edge, e.g.
    `SandboxPolicy.from_env`); before the first `python` call, what killed runs left behind is
    removed (`_set_up`). `warm_up` starts that and the warm sandboxes ahead of the first call."""

    def __init__(self, search: list[Path] | None = None, sandbox: SandboxPolicy | None = None):
        self._search = list(search or [])
        self._sandbox = sandbox or SandboxPolicy()
        self._set_up_done = False
        self._set_up_lock = threading.Lock()  # the set-up runs in worker threads, from any loop, once
        self._prepared: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._preparing: set[asyncio.Task[None]] = set()
        # warm sandboxes, one pool per event loop (their processes belong to the loop that made them)
        self._pools: LoopSessions[SandboxPool | ForkServer] = LoopSessions(self._warm_source)
        self._fns: dict[str, Callable[..., Any] | ImportProblem] = {}
        # keep-alive shorter than common servers' 5 s, so an idle socket the server closed is not reused
        self._http = LoopSessions(
            lambda: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=4.0))
        )

    def _warm_source(self) -> SandboxPool | ForkServer:
        """The fork server where the policy resolves to it, else a pool of started sandboxes."""
        if resolve_backend(self._sandbox) == "fork":
            return ForkServer(self._sandbox)
        return SandboxPool(self._sandbox, self._sandbox.warm)

    async def close(self) -> None:
        """Close the HTTP session and the warm sandboxes of this event loop's tools (no-op if none)."""
        loop = asyncio.get_running_loop()
        for task in [t for t in self._preparing if t.get_loop() is loop]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._prepared.discard(loop)
        await self._pools.close()
        await self._http.close()

    def warm_up(self, tools: Collection[str]) -> None:
        """Start now, in the background, what the first call of `tools` would otherwise wait for:
        for `python`, the one-time set-up and then the warm sandboxes: the fork server and its first
        forks, or a pool's started sandboxes. The executor calls it as each rollout starts; once per event loop, a set
        lookup after that. Why: the first python call of a process waited 50-300 ms for them (the
        fork server's start), on that rollout's path; now they start while the rollout's first LLM
        call is out."""
        if "python" not in tools:
            return
        loop = asyncio.get_running_loop()
        if loop in self._prepared:
            return
        self._prepared.add(loop)
        task = loop.create_task(self._prepare_python())
        self._preparing.add(task)
        task.add_done_callback(self._preparing.discard)

    async def _prepare_python(self) -> None:
        try:
            if not self._set_up_done:
                await asyncio.to_thread(self._set_up)
            if self._sandbox.warm > 0:
                (await self._pools.get()).refill()  # the fork server starts with its first fork
        except Exception:  # nothing is lost: the first call does what failed here again, and reports it
            return

    def _set_up(self) -> None:
        """Once per ToolBox, in a worker thread (a second caller waits for the first): remove what
        killed runs left behind, and probe whether the fork server can work here."""
        with self._set_up_lock:
            if self._set_up_done:
                return
            sweep_leftovers()
            if self._sandbox.warm > 0 and self._sandbox.backend == "auto":
                fork_works()  # the one-time probe (cached), off the event loop
            self._set_up_done = True

    async def _python(self, args: dict[str, Any], timeout: float, resources: RolloutResources | None) -> ToolResult:
        """One-shot by default; `session: true` runs the code in the rollout's own interpreter."""
        if not self._set_up_done:
            await asyncio.to_thread(self._set_up)
        policy = self._sandbox.with_strict(self._sandbox.strict or _truthy(args.get("strict")))
        code = str(args.get("code", ""))
        warm = await self._pools.get() if self._sandbox.warm > 0 else None  # one-shot calls' and sessions'
        if not _truthy(args.get("session")):
            return await run_python(code, timeout=timeout, stdin=args.get("stdin"), policy=policy, warm=warm)
        if resources is None:
            return ToolResult(
                "[python session: no rollout to hold it (called outside a graph)]", ok=False, error="session"
            )
        key = f"python-session:{'strict' if policy.strict else 'plain'}"
        session = resources.get(key) or resources.put(key, PythonSession(policy, warm))
        return await session.call(code, timeout=timeout)

    def _user(self, ref: str) -> Callable[..., Any] | ImportProblem:
        if ref not in self._fns:
            self._fns[ref] = resolve_callable(ref, self._search)
        return self._fns[ref]

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float,
        max_chars: int | None,
        resources: RolloutResources | None = None,
    ) -> ToolResult:
        try:
            res = await within(self._dispatch(tool, args, timeout, resources), timeout + 1.0)
        except asyncio.TimeoutError:
            res = ToolResult(f"[tool {tool} timed out after {timeout:g} s]", ok=False, error="timeout")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool's crash is an observation, not the rollout's end
            res = ToolResult(
                f"[tool {tool} failed: {type(exc).__name__}: {exc}]", ok=False, error=f"{type(exc).__name__}: {exc}"
            )
        if tool in TOOL_FIELDS:  # a built-in's documented fields exist even when it failed (None then)
            data = dict.fromkeys(TOOL_FIELDS[tool]) | (res.data if isinstance(res.data, dict) else {})
            return ToolResult(cut(res.text, max_chars), res.ok, res.error, data)
        return ToolResult(cut(res.text, max_chars), res.ok, res.error, res.data)

    async def _dispatch(
        self, tool: str, args: dict[str, Any], timeout: float, resources: RolloutResources | None
    ) -> ToolResult:
        if tool == "python":
            return await self._python(args, timeout, resources)
        if tool == "env_step":
            return await environment.step(environment_of(resources), args.get("action"))
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
        args = with_env(fn, args, environment_of(resources))
        if inspect.iscoroutinefunction(fn):
            value = await fn(**args)
        else:
            value = await asyncio.to_thread(fn, **args)
        return _as_result(value)


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true", "yes")


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
