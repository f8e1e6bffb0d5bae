"""Sub-graph files: a `graph` node's file -> the child `Graph`, confined and loaded like the parent.

Input: the parent `Graph`, a `graph` node id. Output: `(child Graph | None, diagnostics)`; the
child's own load diagnostics are located in the child's file, a file that cannot be used (missing,
outside the parent's folder, not a regular file) is E312 at the node's `graph:` value.

Invariants: a child path is relative to the parent graph file and must resolve inside the parent's
folder unless the parent says `templates_outside: true` (the rule of template files); the file is
read by `spec.load` only. Recursion is the caller's to detect (`resolved` gives the key).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..spec.diagnostics import Diagnostic, did_you_mean_file
from ..spec.load import Graph, graph_from_located, load_graph
from ..spec.nodes import GraphNode
from ..spec.yamlsrc import Located
from .targets import TARGETS, sections


def child_path(g: Graph, nid: str) -> Path | None:
    """The child's file; None for an inline group."""
    node = g.nodes[nid]
    assert isinstance(node, GraphNode)
    return g.base_dir / node.graph if isinstance(node.graph, str) else None


def resolved(path: str | Path) -> Path:
    return Path(path).resolve()


def graph_nodes(g: Graph) -> list[str]:
    return [nid for nid, n in g.nodes.items() if isinstance(n, GraphNode)]


def load_child(g: Graph, nid: str) -> tuple[Graph | None, list[Diagnostic]]:
    """The child graph of node `nid`, or None with the reason (E312, or the child's own diagnostics)."""
    path = child_path(g, nid)
    if path is None:
        return _inline_child(g, nid)
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
        written = Path(os.path.relpath(path, g.base_dir)).as_posix()
        hint = did_you_mean_file(written, near) or f"sub-graph paths are relative to the graph file ({g.base_dir})"
        return None, [Diagnostic("E312", f"sub-graph file {path}: {what}", span, hint)]
    child, diags = load_graph(path, sections=sections(TARGETS))
    return child, diags


def _inline_child(g: Graph, nid: str) -> tuple[Graph | None, list[Diagnostic]]:
    """An inline group as a graph of its own: its spans are the parent file's (re-rooted at the group),
    its name `<parent>.<node>`, the parent's constants (its own win) and template folder."""
    prefix = ("nodes", nid, "graph")
    raw = g.located.value["nodes"][nid]["graph"]
    value: dict[str, Any] = {"name": f"{g.spec.name}.{nid}", **raw}
    constants = {**g.spec.constants, **(raw.get("constants") or {})}
    if constants:
        value["constants"] = constants
    for key in ("templates", "templates_outside"):
        if getattr(g.spec, key) and key not in raw:
            value[key] = getattr(g.spec, key)
    n = len(prefix)

    def rerooted(table: Any) -> Any:
        return {p[n:]: s for p, s in table.items() if p[:n] == prefix}

    loc = Located(
        value,
        g.file,
        spans=rerooted(g.located.spans),
        key_spans=rerooted(g.located.key_spans),
        block_paths={p[n:] for p in g.located.block_paths if p[:n] == prefix},
    )
    return graph_from_located(loc, sections=sections(TARGETS))
