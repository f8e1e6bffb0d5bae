"""Sub-graph files: a `graph` node's file -> the child `Graph`, confined and loaded like the parent.

Input: the parent `Graph`, a `graph` node id. Output: `(child Graph | None, diagnostics)`; the
child's own load diagnostics are located in the child's file, a file that cannot be used (missing,
outside the parent's folder, not a regular file) is E312 at the node's `graph:` value.

Invariants: a child path is relative to the parent graph file and must resolve inside the parent's
folder unless the parent says `templates_outside: true` (the rule of template files); the file is
read by `spec.load` only. Recursion is the caller's to detect (`resolved` gives the key).
"""

from __future__ import annotations

from pathlib import Path

from ..spec.diagnostics import Diagnostic, did_you_mean
from ..spec.load import Graph, load_graph
from ..spec.nodes import GraphNode
from .targets import TARGETS, sections


def child_path(g: Graph, nid: str) -> Path:
    node = g.nodes[nid]
    assert isinstance(node, GraphNode)
    return g.base_dir / node.graph


def resolved(path: str | Path) -> Path:
    return Path(path).resolve()


def graph_nodes(g: Graph) -> list[str]:
    return [nid for nid, n in g.nodes.items() if isinstance(n, GraphNode)]


def load_child(g: Graph, nid: str) -> tuple[Graph | None, list[Diagnostic]]:
    """The child graph of node `nid`, or None with the reason (E312, or the child's own diagnostics)."""
    path = child_path(g, nid)
    span = g.span("nodes", nid, "graph")
    real = path.resolve()
    root = g.base_dir.resolve()
    if not g.spec.templates_outside and not real.is_relative_to(root):
        return None, [
            Diagnostic(
                "E312",
                f"sub-graph file {path} is outside the graph's folder {root}",
                span,
                "keep sub-graph files next to the graph (or below it), or set templates_outside: true",
            )
        ]
    if not real.is_file():
        near = sorted(p.name for p in real.parent.glob("*.yaml")) if real.parent.is_dir() else []
        what = "not found" if not real.exists() else "not a regular file"
        hint = did_you_mean(path.name, near) or f"sub-graph paths are relative to the graph file ({g.base_dir})"
        return None, [Diagnostic("E312", f"sub-graph file {path}: {what}", span, hint)]
    child, diags = load_graph(path, sections=sections(TARGETS))
    return child, diags
