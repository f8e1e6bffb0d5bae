"""The executor's ports: where engines, tokenizers, tools and rewards come from.

Input: whatever the caller wires (local engine, SGLang URLs, a scripted engine in tests).
Output: small protocols the executor depends on, plus `StaticEndpoints`, the plain implementation.

Invariant: an unknown model name is an error (`UnknownModel`), never a silent fallback to another
endpoint (slime's router falls back silently; graphrl does not).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..engines.base import Engine
from ..plan import Plan
from .chat import ChatRenderer


class UnknownModel(LookupError):
    pass


class Endpoints(Protocol):
    def engine(self, model: str) -> Engine: ...

    def renderer(self, model: str) -> ChatRenderer: ...

    def semaphore(self, model: str) -> asyncio.Semaphore | None: ...


class StaticEndpoints:
    """Engines by model name; one renderer for all unless given per model; optional concurrency caps."""

    def __init__(
        self,
        engines: Mapping[str, Engine],
        renderer: ChatRenderer,
        *,
        renderers: Mapping[str, ChatRenderer] | None = None,
        max_concurrency: Mapping[str, int] | None = None,
    ):
        self._engines = dict(engines)
        self._renderer = renderer
        self._renderers = dict(renderers or {})
        self._caps = dict(max_concurrency or {})
        self._sems: dict[str, asyncio.Semaphore] = {}

    def engine(self, model: str) -> Engine:
        try:
            return self._engines[model]
        except KeyError:
            known = ", ".join(sorted(self._engines))
            raise UnknownModel(f"no endpoint for model '{model}' (known: {known})") from None

    def renderer(self, model: str) -> ChatRenderer:
        return self._renderers.get(model, self._renderer)

    def semaphore(self, model: str) -> asyncio.Semaphore | None:
        cap = self._caps.get(model)
        if cap is None:
            return None
        sem = self._sems.get(model)
        if sem is None:
            sem = self._sems[model] = asyncio.Semaphore(cap)
        return sem

    async def close(self) -> None:
        for engine in {id(e): e for e in self._engines.values()}.values():
            await engine.close()


def endpoints_for_plan(
    plan: Plan,
    engines: Mapping[str, Engine],
    renderer: ChatRenderer,
    *,
    renderers: Mapping[str, ChatRenderer] | None = None,
) -> StaticEndpoints:
    """`StaticEndpoints` with the concurrency caps the plan's models declare (`max_concurrency`)."""
    caps = {name: d.max_concurrency for name, d in plan.models.items() if d.max_concurrency}
    return StaticEndpoints(engines, renderer, renderers=renderers, max_concurrency=caps)


@dataclass(frozen=True)
class ToolResult:
    text: str
    ok: bool = True
    error: str | None = None
    data: Any = None  # a user tool's structured return value (dict), if any


class RolloutResources:
    """What one rollout owns and must release at its end, whatever happened (python sessions,
    environments): objects by key, each closed once by `close()` (sync or async `close`, in reverse
    order of creation). Errors while closing are collected, never raised into the rollout's result."""

    def __init__(self) -> None:
        self._items: dict[str, Any] = {}
        self.close_errors: list[str] = []

    def get(self, key: str) -> Any:
        return self._items.get(key)

    def put(self, key: str, item: Any) -> Any:
        self._items[key] = item
        return item

    async def close(self) -> None:
        items, self._items = list(self._items.items()), {}
        for key, item in reversed(items):
            close = getattr(item, "close", None)
            if close is None:
                continue
            try:
                done = close()
                if asyncio.iscoroutine(done):
                    await done
            except Exception as exc:  # a user environment's close may raise anything
                self.close_errors.append(f"{key}: {type(exc).__name__}: {exc}")


class ToolRunner(Protocol):
    """Runs a tool node's call. It may also have `warm_up(tools)`, a plain method the executor calls
    as each rollout starts with the tools its graph uses (`ToolBox.warm_up`); it must return at once."""

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        timeout: float,
        max_chars: int | None,
        resources: RolloutResources | None = None,
    ) -> ToolResult: ...

    async def close(self) -> None: ...


# judge(model, messages, max_tokens) -> text of the judge model's answer
JudgeFn = Callable[[str, list[dict[str, Any]], int], Awaitable[str]]


class RewardScorer(Protocol):
    async def score(
        self, fn: str, args: dict[str, Any], *, judge_model: str | None, judge: JudgeFn, env: Any = None
    ) -> float | dict[str, Any]: ...
