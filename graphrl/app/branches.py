"""Which branches a run took: a plan + the rollouts' paths -> a few lines for `graphrl demo`.

Input: a `Plan` and a `RunSummary` (its `routes`: (a rollout's path node names, its ending) -> count
over the run's rollouts, and `visits`: node -> visits).
Output: text: for every node with more than one way out (a switch, a conditional `next`, an
`on_limit` / `on_error` target), each target with how many times it was taken (0 included), then
the node kinds that ran (`llm 5/5 nodes, tool 1/1, ...`) and the nodes that never ran.

Invariants: counts come only from the paths the executor recorded (nothing is inferred); a target
the plan does not list but the run took (a node's on_limit redirect) is shown too, never dropped.
A path is read as routing steps of the graph (`routing_transitions`): a sub-graph's own nodes
(`solve/draft`) and a fork's branches run inside one step of their `graph` / `parallel` node, and the
items of one `foreach` visit are one step, so none of them is taken for a branch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..spec.model import END


def targets(node: Any) -> list[str]:
    """The nodes (or end/abort) a node may go to next, in the order the graph lists them."""
    out: list[str] = []
    if node.kind == "switch":
        out += list(node.cases.values()) + [node.default or END]
    else:
        nxt = getattr(node, "next", None)
        out += [b.goto for b in nxt] if nxt else [END]
    for extra in (
        getattr(node, "on_limit", None) if (node.max_visits or node.token_budget) else None,
        getattr(node, "on_error", None),
    ):
        if extra:
            out.append(extra)
    return list(dict.fromkeys(out))


def routing_steps(plan: Any, nodes: Sequence[str]) -> list[str]:
    """A path's node names -> the graph's routing steps (see the module docstring)."""
    branches = {b for n in plan.nodes.values() if n.kind == "parallel" for b in n.parallel}
    out: list[str] = []
    for name in nodes:
        if name not in plan.nodes or name in branches:  # a child's node, or a branch of a fork
            continue
        if out and out[-1] == name and getattr(plan.nodes[name], "foreach", None) is not None:
            continue  # the next item of the same foreach visit
        out.append(name)
    return out


def routing_transitions(plan: Any, routes: Mapping[tuple[tuple[str, ...], str], int]) -> Counter:
    """(path node names, ending) -> count  ==>  (node, next step or ending) -> count."""
    out: Counter = Counter()
    for (nodes, ending), n in routes.items():
        steps = routing_steps(plan, nodes)
        for pair in zip(steps, steps[1:] + [ending]):
            out[pair] += n
    return out


def branch_report(plan: Any, transitions: dict[tuple[str, str], int], visits: dict[str, int]) -> str:
    lines = ["branches taken (target x times, over all rollouts):"]
    for nid, node in plan.nodes.items():
        listed = targets(node)
        taken = {b: n for (a, b), n in transitions.items() if a == nid}
        every = listed + [t for t in taken if t not in listed]
        if len(every) < 2:
            continue
        lines.append(f"  {nid} ({node.kind}): " + ", ".join(f"{t} {taken.get(t, 0)}" for t in every))
    kinds: dict[str, list[int]] = {}
    for nid, node in plan.nodes.items():
        ran_total = kinds.setdefault(node.kind, [0, 0])
        ran_total[1] += 1
        ran_total[0] += visits.get(nid, 0) > 0
    lines.append("node kinds run: " + ", ".join(f"{k} {r}/{t} nodes" for k, (r, t) in kinds.items()))
    never = [nid for nid in plan.nodes if not visits.get(nid)]
    lines.append("nodes never run: " + (", ".join(never) if never else "none"))
    return "\n".join(lines)
