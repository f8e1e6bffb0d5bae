"""Graph nodes: run the child plan as a sub-graph of this rollout, in its own scope.

The child gets a `RolloutState` of its own (inputs from the node's `inputs:`, its declared state
and threads, its own visit counts) sharing the rollout's id, data row, resources (python sessions;
a child uses no environment: it is checked as a graph without one) and abort signal; its steps and policy tokens count toward the rollout's limits. When it ends
(normally, by a fault, or cancelled), a merge is left in `RolloutState.pending` that the executor
applies in item order: the child's samples, calls, path and node rewards join the rollout, their
node ids qualified as `<graph node>/<child node>` and their visits numbered per qualified id (so
foreach items and parallel runs stay distinct). An abort or truncation inside the child, or the
child routing to `abort`, ends the rollout the same way; a fault propagates (the graph node's
`on_error` may catch it).

Result: one field per child state variable (its final value), `text` (the text of the last node
result the child made), `ok` (it reached its end) and `status`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...spec.common import ABORT
from ..ledger import LedgerError, SampleBuilder
from ..rollout import RolloutState, StepServices
from ..scope import NodeResult
from ..values import copy_value
from .base import Handler


async def run_graph(
    ex: StepServices, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any]
) -> NodeResult:
    child = ex.subgraph(nid)
    given = {name: ex.render.value(("nodes", nid, "inputs", name), t, ctx) for name, t in node.inputs.items()}
    cr = RolloutState(inp=r.inp, ns={}, state={}, t0=r.t0, resources=r.resources, abort=r.abort)
    cr.steps, cr.policy_tokens = r.steps, r.policy_tokens
    base = (r.steps, r.policy_tokens)
    _enter(child.plan, cr, given, r)
    end = None
    try:
        end = await child.walk(cr)
    finally:
        r.pending[(nid, visit)] = lambda: _merge(r, cr, nid, base)
    if cr.status in ("aborted", "truncated"):
        r.status, r.aborted_by = cr.status, cr.aborted_by
        r.error = f"in sub-graph '{nid}': {cr.error}"
    elif end == ABORT:
        r.status, r.aborted_by = "aborted", "graph"
        r.error = f"sub-graph '{nid}' routed to abort"
    last = next((n for n, _ in reversed(cr.path) if n in child.plan.nodes), None)  # not a grandchild's
    out = NodeResult({k: copy_value(v) for k, v in cr.state.items()})
    out.update(text=str(cr.ns.get(last, "")) if last else "", ok=end is not None and end != ABORT, status=cr.status)
    if end == ABORT:
        out["status"] = "aborted"
    return out


def _enter(plan: Any, cr: RolloutState, given: dict[str, Any], parent: RolloutState) -> None:
    """The child's scope (`RolloutState.enter`): its inputs are the values given, else their default."""
    inputs = {name: given[name] if name in given else copy_value(decl.default) for name, decl in plan.inputs.items()}
    cr.enter(plan, parent.ns.get("row"), inputs)


def _merge(r: RolloutState, cr: RolloutState, nid: str, base: tuple[int, int]) -> None:
    """The child's samples, calls, path and node rewards into the rollout, node ids qualified."""
    names: dict[tuple[str, int], tuple[str, int]] = {}
    for cn, cv in cr.path:
        q = f"{nid}/{cn}"
        r.visits[q] = r.visits.get(q, 0) + 1
        names[(cn, cv)] = (q, r.visits[q])
        r.path.append(names[(cn, cv)])

    def name(node: str, visit: int) -> tuple[str, int]:
        return names.get((node, visit), (f"{nid}/{node}", visit))

    for s in cr.samples:
        if isinstance(s, SampleBuilder):
            try:
                s = s.freeze()
            except LedgerError:
                continue  # a thread sample with no response yet: nothing to train on
        spans = tuple(_renamed(sp, name) for sp in s.spans)
        calls = tuple(_renamed(c, name) for c in s.calls)
        r.samples.append(dataclasses.replace(s, spans=spans, calls=calls))
    r.calls.extend(_renamed(c, name) for c in cr.calls)
    for key, value in cr.node_rewards.items():
        r.node_rewards[name(*key)] = value
    r.steps += cr.steps - base[0]
    r.policy_tokens += cr.policy_tokens - base[1]
    r.engine_s += cr.engine_s
    if cr.last_finish is not None:
        r.last_finish = cr.last_finish


def _renamed(call: Any, name: Any) -> Any:
    node, visit = name(call.node, call.visit)
    return dataclasses.replace(call, node=node, visit=visit)


__all__ = ["HANDLER"]

HANDLER = Handler(run=run_graph)
