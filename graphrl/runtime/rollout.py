"""One rollout in flight, and what the executor offers the node handlers.

Input/Output: `RolloutState` (mutable, one per rollout, owned by the executor) and `StepServices`,
the protocol of the executor's services a handler in `graphrl.runtime.handlers` may call.
Invariant: handlers change a rollout only through its `RolloutState` and these services.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..engines.base import Generation
from ..plan import Plan
from .ledger import CallRecord, SampleBuilder, TrainingSample
from .renderers import ModelRenderers
from .scope import Renderer
from .services import Endpoints, RolloutResources, ToolRunner
from .trained_thread import TrainedThread
from .values import copy_value


class AbortSignal(Protocol):
    """What `Executor.run(abort=...)` reads before each node: an `asyncio.Event`, or any flag view."""

    def is_set(self) -> bool: ...


class RolloutFault(Exception):
    """Ends one rollout with `status` (e.g. an input missing from the row)."""

    def __init__(self, message: str, status: str = "failed"):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RolloutInput:
    row: Mapping[str, Any]  # {"prompt", "label", "metadata"}
    rollout_id: int | str
    group: int = 0
    seed: int | None = None
    session_id: str | None = None


@dataclass
class RolloutState:
    inp: RolloutInput
    ns: dict[str, Any]
    state: dict[str, Any]
    visits: dict[str, int] = field(default_factory=dict)
    threads: dict[str, TrainedThread] = field(default_factory=dict)
    samples: list[TrainingSample | SampleBuilder] = field(default_factory=list)  # in creation order
    path: list[tuple[str, int]] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    policy_tokens: int = 0
    steps: int = 0
    t0: float = 0.0
    last_finish: str | None = None
    engine_s: float = 0.0
    status: str = "completed"
    error: str | None = None
    resources: RolloutResources = field(default_factory=RolloutResources)  # closed when the rollout ends
    node_rewards: dict[tuple[str, int], float] = field(default_factory=dict)  # (node, visit) -> its own reward
    aborted_by: str | None = None  # "engine" | "caller" | "graph" when status is aborted
    abort: AbortSignal | None = None  # the caller's abort signal (sub-graphs read it too)
    # (node, visit) -> merges a finished sub-graph run into this rollout; applied in item order
    pending: dict[tuple[str, int], Callable[[], None]] = field(default_factory=dict)

    def enter(self, plan: Plan, row: Any, inputs: Mapping[str, Any]) -> None:
        """Open the graph's scope (a rollout's, or a sub-graph run's): its constants, the row, visits
        and threads, the input values given, and every state variable at its default."""
        self.ns.update(plan.constants)
        for nid in plan.nodes:  # `visits.<node>` is 0 for a node that has not run yet, not undefined
            self.visits.setdefault(nid, 0)
        self.ns.update(row=row, visits=self.visits, threads={})
        self.ns.update(inputs)
        for name, var in plan.state.items():
            self.state[name] = copy_value(var.default)


def merge_pending(r: RolloutState, keys: list[tuple[str, int]]) -> None:
    """Apply the pending sub-graph merges of these (node, visit)s, in this order."""
    for key in keys:
        merge = r.pending.pop(key, None)
        if merge is not None:
            merge()


class GraphRunner(Protocol):
    """A sub-graph's executor, as its `graph` node's handler uses it."""

    plan: Plan

    async def walk(self, r: RolloutState) -> str | None: ...


class StepServices(Protocol):
    plan: Plan
    render: Renderer
    endpoints: Endpoints
    renderers: ModelRenderers
    tools: ToolRunner
    sampling: dict[str, Any]  # fixed once the executor is made
    params_cache: dict[Any, dict[str, Any]]  # sampling parameters made per (node, model, stop ids)
    clock: Callable[[], float]
    max_context_tokens: int | None  # bound on a trained call's prompt + output (None: no bound)

    def thread(self, r: RolloutState, name: str) -> TrainedThread: ...

    def messages(self, path: tuple, prompt: Any, ctx: dict[str, Any]) -> list[dict[str, Any]]: ...

    def plain_text(self, path: tuple, value: Any) -> Any: ...

    async def generate(
        self, r: RolloutState, model: str, ids: tuple[int, ...], params: dict[str, Any], nid: str, visit: int
    ) -> tuple[Generation, CallRecord]: ...

    def user_callable(self, ref: str) -> Callable[..., Any]: ...

    def subgraph(self, nid: str) -> GraphRunner: ...
