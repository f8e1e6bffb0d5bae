"""Switch nodes: no call; the value of `switch:` picks a case (booleans as true/false), else `default`."""

from __future__ import annotations

from typing import Any

from ...spec.common import END
from ...spec.nodes import case_key
from ..rollout import StepServices
from .base import Handler, decided_per_visit, no_call


def route_switch(ex: StepServices, nid: str, node: Any, ctx: dict[str, Any]) -> str:
    value = ex.render.expr(("nodes", nid, "switch"), node.switch, ctx)
    return node.cases.get(case_key(value), node.default or END)


HANDLER = Handler(run=no_call, route=route_switch, fixed=decided_per_visit)
