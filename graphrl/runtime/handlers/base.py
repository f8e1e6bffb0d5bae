"""The handler protocol, and the routing every kind with `next:` shares."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ...spec.common import END
from ..rollout import RolloutState, StepServices
from ..scope import NodeResult

RunFn = Callable[[StepServices, RolloutState, str, Any, int, dict[str, Any]], Awaitable[NodeResult]]
RouteFn = Callable[[StepServices, str, Any, dict[str, Any]], str]


def route_next(ex: StepServices, nid: str, node: Any, ctx: dict[str, Any]) -> str:
    """The first branch of `next:` whose `when` holds (a branch without `when` always does); else end."""
    for i, branch in enumerate(node.next or ()):
        if branch.when is None or ex.render.expr(("nodes", nid, "next", i, "when"), branch.when, ctx):
            return branch.goto
    return END


async def no_call(
    ex: StepServices, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any]
) -> NodeResult:
    """A node that calls nothing: an empty result (its `update:` and routing still run)."""
    return NodeResult()


@dataclass(frozen=True)
class Handler:
    run: RunFn
    route: RouteFn = route_next
