"""Graph -> control-flow digraph (networkx), shared by checks, lowering and diagrams.

Input: a loaded `Graph`. Output: `Flow`: a `networkx.DiGraph` over node ids plus the terminals
`end` and `abort`, each edge labelled with how it is taken (next/when/case/default/limit), and the
references to node ids with their YAML paths (for unknown-node errors).

Invariants: edges to unknown ids are kept out of the digraph and listed in `Flow.refs` only;
a node with no `next` (and not a switch) has an edge to `end`.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..spec.load import Graph
from ..spec.model import END, TERMINALS, SwitchNode


@dataclass(frozen=True)
class Ref:
    source: str  # node id the reference sits in ("" for graph-level, e.g. start)
    target: str
    path: tuple  # YAML path of the reference
    label: str  # "next", "when: <expr>", "case <v>", "default", "on_limit"


@dataclass(frozen=True)
class Flow:
    graph: nx.DiGraph
    refs: tuple[Ref, ...]
    start: str


def _raw_case_keys(g: Graph, nid: str) -> dict[str, object]:
    """Case value (as the model normalises it) -> the key as YAML read it (`true:` is a bool), for spans."""
    raw = g.located.value.get("nodes", {}).get(nid, {}) if isinstance(g.located.value, dict) else {}
    cases = raw.get("cases") if isinstance(raw, dict) else None
    if not isinstance(cases, dict):
        return {}
    return {(str(k).lower() if isinstance(k, bool) else str(k)): k for k in cases}


def build_flow(g: Graph) -> Flow:
    refs: list[Ref] = []
    if g.spec.start:
        refs.append(Ref("", g.spec.start, ("start",), "start"))
    for nid, n in g.nodes.items():
        base = ("nodes", nid)
        if isinstance(n, SwitchNode):
            raw_keys = _raw_case_keys(g, nid)
            for value, target in n.cases.items():
                refs.append(Ref(nid, target, base + ("cases", raw_keys.get(value, value)), f"case {value}"))
            if n.default is not None:
                refs.append(Ref(nid, n.default, base + ("default",), "default"))
        elif n.next is None:
            refs.append(Ref(nid, END, base, "next"))
        else:
            for i, b in enumerate(n.next):
                label = f"when {b.when}" if b.when is not None else ("next" if len(n.next) == 1 else "else")
                refs.append(Ref(nid, b.goto, base + ("next", i, "goto"), label))
        if getattr(n, "on_error", None) is not None:
            refs.append(Ref(nid, n.on_error, base + ("on_error",), "on_error"))
        if n.max_visits is not None or n.token_budget is not None:
            refs.append(Ref(nid, n.on_limit or END, base + ("on_limit",), "on_limit"))
    dg = nx.DiGraph()
    dg.add_nodes_from(g.nodes)
    dg.add_nodes_from(TERMINALS)
    known = set(g.nodes) | set(TERMINALS)
    for r in refs:
        if r.source and r.target in known:
            if dg.has_edge(r.source, r.target):
                dg.edges[r.source, r.target]["labels"].append(r.label)
            else:
                dg.add_edge(r.source, r.target, labels=[r.label])
    return Flow(dg, tuple(refs), g.start)
