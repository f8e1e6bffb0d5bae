"""Graph -> control-flow digraph (networkx), shared by checks, lowering and diagrams.

Input: a loaded `Graph`. Output: `Flow`: a `networkx.DiGraph` over node ids plus the terminals
`end` and `abort`, each edge labelled with how it is taken (next/when/case/default/limit), and the
references to node ids with their YAML paths (for unknown-node errors).

Invariants: edges to unknown ids are kept out of the digraph and listed in `Flow.refs` only;
a node with no `next` (and not a switch) has an edge to `end`. A `parallel` fork's branches run
between the fork and its `next`: the digraph has fork -> branch and branch -> each of the fork's
`next` targets (not the branches' own edges, nor the fork's `next` edges themselves).
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..spec.load import Graph
from ..spec.model import END, TERMINALS
from ..spec.nodes import case_key


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


def _yaml_path(g: Graph, base: tuple, path: tuple) -> tuple:
    """A kind's edge path with each key as the YAML read it (a normalised case key such as `true`
    is the boolean key `true:` in the file), so that spans point at the key."""
    raw = g.located.value
    for p in base:
        raw = raw.get(p) if isinstance(raw, dict) else None
    out = []
    for p in path:
        if isinstance(raw, dict) and p not in raw:
            p = next((k for k in raw if case_key(k) == p), p)
        out.append(p)
        raw = (
            raw.get(p)
            if isinstance(raw, dict)
            else (raw[p] if isinstance(raw, list) and isinstance(p, int) and 0 <= p < len(raw) else None)
        )
    return tuple(out)


def build_flow(g: Graph) -> Flow:
    refs: list[Ref] = []
    if g.spec.start:
        refs.append(Ref("", g.spec.start, ("start",), "start"))
    for nid, n in g.nodes.items():
        base = ("nodes", nid)
        for path, target, label in n.edges():
            refs.append(Ref(nid, target, base + _yaml_path(g, base, path), label))
        on_error = getattr(n, "on_error", None)
        if on_error is not None:
            refs.append(Ref(nid, on_error, base + ("on_error",), "on_error"))
        if n.max_visits is not None or n.token_budget is not None:
            refs.append(Ref(nid, n.on_limit or END, base + ("on_limit",), "on_limit"))
    dg = nx.DiGraph()
    dg.add_nodes_from(g.nodes)
    dg.add_nodes_from(TERMINALS)
    known = set(g.nodes) | set(TERMINALS)
    forks = {nid: n for nid, n in g.nodes.items() if n.kind == "parallel"}
    branch_of = {b: pid for pid, p in forks.items() for b in p.parallel if b in g.nodes and b != pid}
    joined = {pid for pid in branch_of.values()}
    for r in list(refs):
        if r.source in joined and r.label not in ("branch", "on_error", "on_limit"):
            refs.extend(Ref(b, r.target, r.path, r.label) for b, pid in branch_of.items() if pid == r.source)
    for r in refs:
        skip = r.source in branch_of and r.path[:2] == ("nodes", r.source)  # a branch's own edges
        skip = skip or (r.source in joined and r.label not in ("branch", "on_error", "on_limit"))
        if r.source and r.target in known and not skip:
            if dg.has_edge(r.source, r.target):
                dg.edges[r.source, r.target]["labels"].append(r.label)
            else:
                dg.add_edge(r.source, r.target, labels=[r.label])
    return Flow(dg, tuple(refs), g.start)
