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


def visit_bound(g: Graph, flow: Flow, nid: str) -> int | None:
    """Upper bound on calls of a node per rollout (foreach items x visits); None when unbounded."""
    n = g.nodes[nid]
    on_cycle = any(
        nid in c and (len(c) > 1 or flow.graph.has_edge(nid, nid)) for c in nx.strongly_connected_components(flow.graph)
    )
    visits = (n.max_visits or g.spec.limits.max_steps) if on_cycle else 1
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
    drift = any(g.spec.threads[t].on_drift == "new_sample" for t in threads if t in g.spec.threads)
    return SampleLayout(per_call, threads, calls + len(threads) > 1 or drift)
