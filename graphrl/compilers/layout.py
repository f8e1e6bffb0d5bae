"""Training layout of a graph: which calls make training samples, and how many per rollout.

Input: a loaded `Graph` and its `Flow`. Output: `SampleLayout` (nodes sampled per call, threads
sampled whole, whether one rollout can yield several samples: "fan-out", docs/architecture.md,
slime contract §1) and `visit_bound`. Used by the checks, lowering and the compile targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..spec.load import Graph
from ..spec.model import LLMNode
from .flow import Flow

DEFAULT_MAX_TOKENS = 1024  # the runtime's default when neither the node nor limits.max_tokens sets it


@dataclass(frozen=True)
class SampleLayout:
    per_call: tuple[str, ...]  # nodes whose every call is its own training sample
    threads: tuple[str, ...]  # threads that form one training sample each
    fanout: bool  # one rollout can yield more than one training sample
    drift: tuple[str, ...] = ()  # sampled threads that may start a new sample on a history rewrite


def _on_cycle(flow: Flow, nid: str) -> bool:
    return any(
        nid in c and (len(c) > 1 or flow.graph.has_edge(nid, nid)) for c in nx.strongly_connected_components(flow.graph)
    )


def _reaches(g: Graph, flow: Flow, a: str, b: str) -> bool:
    """Can node b run after node a in one rollout (a itself again: a loop or a foreach)?"""
    if a not in flow.graph or b not in flow.graph:
        return False
    if a == b:
        return bool(g.nodes[a].foreach) or _on_cycle(flow, a)
    return nx.has_path(flow.graph, a, b)


def rerendered_threads(g: Graph, flow: Flow) -> dict[str, set[str]]:
    """Threads whose conversation can be rendered again after one of their outputs, with new messages
    (a thread node's `prompt:`, or an `append_to` without `in_response`): thread -> the roles of
    those messages (`messages` for a `messages:` item). Only these can meet a chat template that
    rewrites history (in-response text continues the ids and is never re-rendered)."""
    out: dict[str, set[str]] = {}
    for tid in g.spec.threads:
        callers = [nid for nid, n in g.nodes.items() if isinstance(n, LLMNode) and n.thread == tid]
        for nid, n in g.nodes.items():
            if isinstance(n, LLMNode) and n.thread == tid and n.prompt:
                if any(_reaches(g, flow, c, nid) for c in callers):
                    out.setdefault(tid, set()).update(m.role for m in n.prompt)
            if n.append_to and n.append_to.thread == tid and not n.append_to.in_response:
                after_output = any(c == nid or _reaches(g, flow, c, nid) for c in callers)
                then_call = any(_reaches(g, flow, nid, c) for c in callers)
                if after_output and then_call:
                    out.setdefault(tid, set()).add(n.append_to.role)
    return out


def visit_bound(g: Graph, flow: Flow, nid: str) -> int | None:
    """Upper bound on calls of a node per rollout (foreach items x visits); None when unbounded."""
    n = g.nodes[nid]
    visits = (n.max_visits or g.spec.limits.max_steps) if _on_cycle(flow, nid) else 1
    if n.foreach:
        return None if visits is None or n.foreach.max is None else visits * n.foreach.max
    return visits


def sample_layout(g: Graph, flow: Flow) -> SampleLayout:
    per_call = tuple(nid for nid, n in g.nodes.items() if isinstance(n, LLMNode) and n.sample_mode == "call")
    threads = tuple(
        sorted(
            {n.thread for n in g.nodes.values() if isinstance(n, LLMNode) and n.sample_mode == "thread" and n.thread}
        )
    )
    calls = sum((visit_bound(g, flow, nid) or 2) for nid in per_call)
    again = rerendered_threads(g, flow)
    # threads that may restart as a new sample: re-rendered with on_drift: new_sample, or with a
    # token budget (truncation restarts them) and called more than once
    drift = tuple(
        t
        for t in threads
        if t in g.spec.threads
        and (
            (g.spec.threads[t].on_drift == "new_sample" and t in again)
            or (g.spec.threads[t].max_tokens is not None and _called_again(g, flow, t))
        )
    )
    subgraphs = any(n.kind == "graph" for n in g.nodes.values())  # each run's samples join the rollout's
    return SampleLayout(per_call, threads, calls + len(threads) > 1 or bool(drift) or subgraphs, drift)


def _called_again(g: Graph, flow: Flow, thread: str) -> bool:
    """A thread whose nodes may call it more than once (a loop, several nodes, or foreach)."""
    nodes = [nid for nid, n in g.nodes.items() if isinstance(n, LLMNode) and n.thread == thread]
    return len(nodes) > 1 or any((visit_bound(g, flow, nid) or 2) > 1 for nid in nodes)
