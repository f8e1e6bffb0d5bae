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


def fixed_next(node: Any) -> str | None:
    """Where `route_next` sends `node` at every visit (its first branch has no `when`; END without
    branches), or None when a condition decides: the executor then routes without building a context."""
    branches = node.next or ()
    if not branches:
        return END
    return branches[0].goto if branches[0].when is None else None


def decided_per_visit(node: Any) -> str | None:
    """For a route that always needs the visit's values (a switch)."""
    return None


async def no_call(
    ex: StepServices, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any]
) -> NodeResult:
    """A node that calls nothing: an empty result (its `update:` and routing still run)."""
    return NodeResult()


@dataclass(frozen=True)
class Handler:
    run: RunFn
    route: RouteFn = route_next
    fixed: Callable[[Any], str | None] = fixed_next  # `route`'s answer when no visit can change it, else None
