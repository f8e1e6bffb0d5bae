"""The `graph` node kind: run another graph file as a sub-graph, in its own scope.

YAML: `graph: FILE` (relative to this graph file, inside its folder unless `templates_outside:
true`) or `graph: {inputs:, state:, threads:, constants:, start:, nodes:}` (an inline group, located
in this file, seeing this file's constants), `inputs: {child_input: template}`. The child's own inputs, state and threads form its
scope; models and tools are the parent's. The node's result holds the child's final state (one
field per state variable), `text` (the text of the last node the child ran), `ok` and `status`.
Checks: `graphrl.compilers.checks.subgraphs`; runtime: `graphrl.runtime.handlers.graph`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..walk import walk_strings
from .base import FlowNode, Path


class GraphNode(FlowNode):
    selector: ClassVar[str | None] = "graph"
    shape: ClassVar[str] = "rounded"

    kind: Literal["graph"] = "graph"
    graph: str | dict[str, Any] = Field(
        description="a graph file run as a sub-graph, relative to this graph file; or an inline group "
        "{inputs, state, threads, constants, start, nodes} (it sees this file's constants)"
    )
    inputs: dict[str, Any] = Field(
        default_factory=dict, description="the child graph's inputs: name -> template over this graph's values"
    )

    def sites(self) -> Iterator[tuple[Path, str, str]]:
        for path, text in walk_strings(self.inputs, ("inputs",)):
            yield path, text, "template"

    def lines(self) -> list[str]:
        what = self.graph if isinstance(self.graph, str) else f"inline, {len(self.graph.get('nodes') or ())} nodes"
        out = [f"graph · {what}", "sub-graph · samples as its nodes declare"]
        return out + ([f"inputs {', '.join(self.inputs)}"] if self.inputs else [])
