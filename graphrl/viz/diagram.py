"""Plan -> Diagram: what a graph picture shows, independent of how it is drawn.

Input: a lowered `Plan` (from a graph YAML or a plan.json, see `compilers.lower.plan_from_path`), or,
when no graph file is at hand, the node paths a trajectory took (`diagram_from_paths`).
Output: a frozen `Diagram`: nodes with their kind (llm, tool, switch, update, start, end, abort), their
training role and detail lines (model endpoint, thread, bounds), and edges labelled with how they are
taken (condition, switch case, router default, on_error, on_limit).

Roles (the fill colour of a node):
  trained  an llm node whose generated tokens enter a training sample with loss mask 1;
  masked   tokens enter a training sample with loss mask 0 (an untrained policy call, or a node
           that appends its result to a conversation thread);
  frozen   an llm node on another model (or the policy with `sample: none`): in no sample;
  none     control and tools: in no training sequence.

Invariants: edges come from `compilers.flow.build_flow` (the same edges the checks and the runtime
see), in its order; node order is the graph's order, then start/end/abort; pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

from ..compilers.flow import build_flow
from ..spec.model import ABORT, END, LLMNode
from ..spec.nodes import NODE_KINDS

START = "__start__"
ROLE_TEXT = {
    "trained": "trained policy (loss mask 1)",
    "masked": "in a sample, masked (loss mask 0)",
    "frozen": "frozen model, in no sample",
    "none": "in no training sequence",
}
EDGE_TEXT = {
    "next": "next",
    "cond": "condition (when) / switch case",
    "default": "else / router default",
    "error": "on_error",
    "limit": "on_limit (max_visits, token_budget)",
}
MAX_LINE = 40


@dataclass(frozen=True)
class DNode:
    id: str
    kind: str  # llm | tool | switch | update | start | end | abort
    role: str  # trained | masked | frozen | none | terminal
    lines: tuple[str, ...] = ()  # detail lines drawn under the id
    title: str = ""  # full text (a tooltip)
    endpoint: str | None = None  # model name of an llm node
    shape: str = ""  # rounded | tool | hexagon | dashed (the kind's), or start | end | abort; "" = kind

    @property
    def form(self) -> str:
        """How to draw it: the node kind's shape (graphrl.spec.nodes), or the terminal's own."""
        return self.shape or self.kind


@dataclass(frozen=True)
class DEdge:
    src: str
    dst: str
    labels: tuple[str, ...]  # the flow's labels: next, when <expr>, else, case <v>, default, on_error, on_limit
    text: str  # what is written on the edge ("" for a plain next)
    style: str  # next | cond | default | error | limit | start
    title: str = ""


@dataclass(frozen=True)
class Diagram:
    name: str
    description: str | None
    start: str
    nodes: tuple[DNode, ...]
    edges: tuple[DEdge, ...]
    note: str | None = None  # e.g. "drawn from the paths taken: no graph file"

    def node(self, nid: str) -> DNode | None:
        return next((n for n in self.nodes if n.id == nid), None)


def short(text: str, limit: int = MAX_LINE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def node_role(n) -> str:
    if isinstance(n, LLMNode):
        if n.sample_mode != "none":
            return "trained" if n.trained else "masked"
        return "frozen" if not n.on_policy else "none"
    return "masked" if getattr(n, "append_to", None) is not None else "none"


def _bounds(n) -> list[str]:
    out = []
    if n.foreach is not None:
        f = n.foreach
        chunk = f" ({f.chunk_tokens} tok)" if f.chunk_tokens else ""
        out.append(f"foreach {f.as_} in {f.over}{chunk}")
    bits = []
    if n.max_visits:
        bits.append(f"max_visits {n.max_visits}")
    if n.token_budget:
        bits.append(f"budget {n.token_budget} tok")
    if bits:
        out.append(" · ".join(bits))
    if n.append_to is not None:
        out.append(f"appends to {n.append_to.thread} (masked)")
    return out


def _node_lines(n) -> list[str]:
    return n.lines() + _bounds(n)


def edge_style(labels: Sequence[str]) -> str:
    first = labels[0]
    if first == "on_error":
        return "error"
    if first == "on_limit":
        return "limit"
    if first in ("default", "else"):
        return "default"
    if first.startswith(("when ", "case ")):
        return "cond"
    return "next"


def edge_text(label: str) -> str:
    if label == "next":
        return ""
    if label.startswith(("when ", "case ")):
        return label.split(" ", 1)[1]
    return label


def _edge(src: str, dst: str, labels: Sequence[str]) -> DEdge:
    texts = [t for t in (edge_text(lb) for lb in labels) if t]
    full = " | ".join(texts)
    return DEdge(src, dst, tuple(labels), short(full, 36), edge_style(labels), full)


def _flow_source(plan) -> SimpleNamespace:
    """The little of a loaded Graph that `build_flow` reads, taken from a plan (edges are resolved there)."""
    return SimpleNamespace(
        spec=SimpleNamespace(start=plan.start), start=plan.start, nodes=plan.nodes, located=SimpleNamespace(value={})
    )


def diagram_from_plan(plan) -> Diagram:
    flow = build_flow(_flow_source(plan))  # type: ignore[arg-type]  # reads only start, nodes, located
    dg = flow.graph
    nodes = [DNode(START, "start", "terminal", ("start",), "start")]
    for nid, n in plan.nodes.items():
        lines = tuple(short(x) for x in _node_lines(n))
        title = "\n".join([nid] + _node_lines(n) + ([n.description] if n.description else []))
        nodes.append(
            DNode(nid, n.kind, node_role(n), lines, title, n.llm if isinstance(n, LLMNode) else None, type(n).shape)
        )
    for term in (END, ABORT):
        if dg.in_degree(term):
            nodes.append(DNode(term, term, "terminal", (), term))
    edges = [DEdge(START, plan.start, ("start",), "", "start")]
    for src, dst, data in dg.edges(data=True):
        edges.append(_edge(src, dst, data["labels"]))
    return Diagram(plan.name, plan.description, plan.start, tuple(nodes), tuple(edges))


def diagram_from_paths(
    name: str,
    paths: Iterable[Sequence[tuple[str, int]]],
    roles: dict[str, str] | None = None,
    endpoints: dict[str, str] | None = None,
    ends: dict[str, str] | None = None,
) -> Diagram:
    """A diagram of the transitions observed in `paths` (node order = first appearance).

    `roles`/`endpoints` come from the trajectory's spans and calls; `ends` maps a path's last node to the
    terminal it reached (end or abort)."""
    roles, endpoints, ends = roles or {}, endpoints or {}, ends or {}
    order: list[str] = []
    pairs: list[tuple[str, str]] = []
    for path in paths:
        prev = None
        for node, _visit in path:
            if node not in order:
                order.append(node)
            if prev is not None and (prev, node) not in pairs:
                pairs.append((prev, node))
            prev = node
    for node, term in sorted(ends.items()):
        if node in order and (node, term) not in pairs:
            pairs.append((node, term))
    start = order[0] if order else END
    nodes = [DNode(START, "start", "terminal", ("start",), "start")]
    for nid in order:
        ep = endpoints.get(nid)
        kind = "llm" if ep and not ep.startswith("tool:") else ("tool" if ep else "update")
        lines = (f"{kind} · {ep.removeprefix('tool:')}",) if ep else ()
        nodes.append(
            DNode(nid, kind, roles.get(nid, "none"), lines, nid, ep if kind == "llm" else None, NODE_KINDS[kind].shape)
        )
    for term in (END, ABORT):
        if any(dst == term for _, dst in pairs):
            nodes.append(DNode(term, term, "terminal", (), term))
    edges = [DEdge(START, start, ("start",), "", "start")] + [_edge(a, b, ("next",)) for a, b in pairs]
    return Diagram(
        name,
        None,
        start,
        tuple(nodes),
        tuple(edges),
        note="no graph file: drawn from the transitions the trajectory took",
    )
