"""Graph-shape checks: unknown targets, reachability, paths to the end, loop bounds, defaults, names.

Input: `Graph` + its `Flow`. Output: diagnostics (E101-E106). Pure; uses networkx for every analysis.
"""

from __future__ import annotations

from collections.abc import Iterator

import networkx as nx

from ...spec.diagnostics import Diagnostic, did_you_mean
from ...spec.load import Graph
from ...spec.model import END, TERMINALS, SwitchNode
from ..flow import Flow

RESERVED = frozenset(
    {"end", "abort", "row", "visit", "visits", "output", "threads", "thread_tokens", "loop", "item", "usage", "env"}
)


def unknown_targets(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    known = set(g.nodes) | set(TERMINALS)
    for r in flow.refs:
        if r.label == "start" and r.target in TERMINALS:  # start must be a node: `start: end` runs nothing
            yield Diagnostic(
                "E101",
                f"start node '{r.target}' is not a node",
                g.span(*r.path),
                f"start names the first node to run: one of {', '.join(g.nodes)}",
            )
        elif r.target not in known:
            hint = did_you_mean(r.target, known) or f"known nodes: {', '.join(g.nodes)}; or end / abort"
            what = "start node" if r.label == "start" else "edge target"
            yield Diagnostic("E101", f"{what} '{r.target}' is not a node", g.span(*r.path), hint)


def unreachable(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    if flow.start not in g.nodes:
        return
    seen = nx.descendants(flow.graph, flow.start) | {flow.start}
    for nid in g.nodes:
        if nid not in seen:
            yield Diagnostic(
                "E102",
                f"node '{nid}' is unreachable from the start node '{flow.start}'",
                g.span("nodes", nid, key=True),
                "add an edge to it, or remove it",
            )


def no_path_to_end(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    finishing = set().union(*(nx.ancestors(flow.graph, t) for t in TERMINALS))
    # A node with an edge to an unknown target (E101) may well finish once that target is fixed:
    # it and its ancestors are not reported again as E103 (no cascades of one typo).
    known = set(g.nodes) | set(TERMINALS)
    dangling = {r.source for r in flow.refs if r.source and r.target not in known}
    for nid in dangling:
        finishing |= {nid} | nx.ancestors(flow.graph, nid)
    for nid in g.nodes:
        if nid not in finishing:
            yield Diagnostic(
                "E103",
                f"from node '{nid}' no path leads to the end",
                g.span("nodes", nid, key=True),
                "give one of the nodes on its loop a branch to a node that finishes (or to end)",
            )


def unbounded_loops(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """E104. In the long run every node with `max_visits` has used its visits, and a walk that reaches
    it goes on to its `on_limit` at once. So the loops that can run forever are the cycles of the flow
    in which such a node keeps only its `on_limit` edge (`spent`): without `limits.max_steps` each is
    an error. A cycle of `on_limit` edges alone (`limits`: nodes stopped by `max_visits` or
    `token_budget`, each sending on to the next) is an error even with `max_steps`: it runs no node,
    so no step is ever counted."""
    spent, limits = nx.DiGraph(), nx.DiGraph()
    spent.add_nodes_from(g.nodes)
    limits.add_nodes_from(g.nodes)
    for nid, n in g.nodes.items():
        target = n.on_limit or END
        if (n.max_visits is not None or n.token_budget is not None) and target in g.nodes:
            limits.add_edge(nid, target)
        if n.max_visits is None:
            spent.add_edges_from((nid, t) for t in flow.graph.successors(nid) if t in g.nodes)
        elif target in g.nodes:
            spent.add_edge(nid, target)
    reported: set[str] = set()
    for first, cycle in _cycles(g, limits):
        reported |= set(cycle)
        yield Diagnostic(
            "E104",
            f"loop {_path(cycle)} runs no node once its limits are reached: each on_limit leads to the next",
            g.span("nodes", first, "on_limit"),
            f"point the on_limit of '{first}' out of the loop (e.g. to end)",
        )
    if g.spec.limits.max_steps is not None:
        return
    for first, cycle in _cycles(g, spent):
        if set(cycle) <= reported:
            continue
        back = next((nid for nid in cycle if g.nodes[nid].max_visits is not None), None)
        if back is None:
            yield Diagnostic(
                "E104",
                f"loop {_path(cycle)} has no bound",
                g.span("nodes", first, key=True),
                f"add max_visits (and on_limit) to a node of the loop, e.g. '{first}', or set limits.max_steps",
            )
        else:
            yield Diagnostic(
                "E104",
                f"loop {_path(cycle)} has no bound: once '{back}' has used its max_visits, its on_limit"
                " leads back into the loop",
                g.span("nodes", back, "on_limit"),
                f"point the on_limit of '{back}' out of the loop (e.g. to end), give another node of the"
                " loop max_visits, or set limits.max_steps",
            )


def _cycles(g: Graph, dg: nx.DiGraph) -> Iterator[tuple[str, list[str]]]:
    """One cycle per strongly connected component of `dg` that has one: (its first node in file
    order, the cycle from that node)."""
    order = list(g.nodes).index
    for comp in sorted(nx.strongly_connected_components(dg), key=lambda c: sorted(c, key=order)):
        first = sorted(comp, key=order)[0]
        if len(comp) == 1 and not dg.has_edge(first, first):
            continue
        yield first, [u for u, _ in nx.find_cycle(dg.subgraph(comp), source=first)]


def _path(cycle: list[str]) -> str:
    return " -> ".join(cycle + [cycle[0]])


def missing_defaults(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    for nid, n in g.nodes.items():
        if isinstance(n, SwitchNode):
            if n.default is None:
                yield Diagnostic(
                    "E105",
                    f"switch '{nid}' has no default",
                    g.span("nodes", nid, "switch"),
                    "add 'default: <node>' for values no case matches",
                )
            continue
        branches = n.next or []
        defaults = [i for i, b in enumerate(branches) if b.when is None]
        if branches and not defaults:
            yield Diagnostic(
                "E105",
                f"the branches of '{nid}' have no default",
                g.span("nodes", nid, "next", len(branches) - 1),
                "end the list with a branch without 'when:' (e.g. '- goto: end')",
            )
        elif defaults and defaults[0] != len(branches) - 1:
            yield Diagnostic(
                "E105",
                f"the branches after the default of '{nid}' are never taken",
                g.span("nodes", nid, "next", defaults[0] + 1),
                "put the branch without 'when:' last",
            )


def names(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    owners: dict[str, str] = {}
    for section in ("constants", "inputs", "state", "nodes"):
        for name in getattr(g.spec, section) if section != "nodes" else g.nodes:
            path = (section, name)
            if name in RESERVED:
                yield Diagnostic(
                    "E106",
                    f"'{name}' is a reserved name",
                    g.span(*path, key=True),
                    f"rename it; reserved: {', '.join(sorted(RESERVED))}",
                )
            elif name in owners:
                yield Diagnostic(
                    "E106",
                    f"'{name}' is both {owners[name]} and {_WHAT[section]}",
                    g.span(*path, key=True),
                    "templates see inputs, state and nodes in one namespace: rename one",
                )
            else:
                owners[name] = _WHAT[section]


_WHAT = {"constants": "a constant", "inputs": "an input", "state": "a state variable", "nodes": "a node"}


def parallel_threads(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """A thread is one conversation: a node continuing it cannot run its foreach items in parallel."""
    for nid, n in g.nodes.items():
        fe = n.foreach
        thread = getattr(n, "thread", None)
        if fe is not None and fe.parallel > 1 and thread:
            yield Diagnostic(
                "E003",
                f"node '{nid}' continues thread '{thread}' and cannot run its items in "
                "parallel: a thread's calls follow one another",
                g.span("nodes", nid, "foreach", "parallel"),
                "remove parallel (or use a fresh prompt: instead of thread:)",
            )


def foreach_over_text(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """E107: `foreach` over what is statically a text (a node's `.text`, a state variable or a
    constant holding a string) without `chunk_tokens`: it would iterate characters."""
    for nid, n in g.nodes.items():
        fe = n.foreach
        if fe is None or fe.chunk_tokens:
            continue
        over = fe.over.strip()
        head, _, attr = over.partition(".")
        text = (attr == "text" and head in g.nodes) or (
            not attr
            and (
                (head in g.spec.state and isinstance(g.spec.state[head].default, str))
                or isinstance(g.spec.constants.get(head), str)
            )
        )
        if text:
            yield Diagnostic(
                "E107",
                f"foreach over '{over}', a text, would run once per character",
                g.span("nodes", nid, "foreach", "over"),
                "add chunk_tokens: N to split it into N-token chunks, or iterate a list",
            )
