"""Which branches a run took: a plan + the rollouts' paths -> a few lines for `graphrl demo`.

Input: a `Plan` and a `RunSummary` (its `transitions`: (from node, to node or end/abort/<status>)
-> count over the run's rollouts, and `visits`: node -> visits).
Output: text: for every node with more than one way out (a switch, a conditional `next`, an
`on_limit` / `on_error` target), each target with how many times it was taken (0 included), then
the node kinds that ran (`llm 5/5 nodes, tool 1/1, ...`) and the nodes that never ran.

Invariants: counts come only from the paths the executor recorded (nothing is inferred); a target
the plan does not list but the run took (a node's on_limit redirect) is shown too, never dropped.
"""

from __future__ import annotations

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
