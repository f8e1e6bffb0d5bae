"""The node kinds of the graph language, defined once: one module per kind, listed in `KINDS`.

Input: a node's YAML mapping. Output: the kind's frozen model (`node_kind(raw)` picks it by its
selector key). Every other stage learns about a kind through the hooks of `NodeBase` (see base.py)
and, at run time, through the handler table of `graphrl.runtime.handlers`; the schema, the loader,
the plan's node union, the flow graph and the diagrams all iterate `KINDS`.

Adding a kind: a module here (a `NodeBase` / `FlowNode` subclass with a `kind` literal and its
hooks), its name in `KINDS`, a handler module in `graphrl/runtime/handlers/` and its entry in
`HANDLERS` (a test checks every kind has one), tests, and docs/graph-language.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Discriminator, Tag

from .base import AppendTo, FlowNode, Foreach, NodeBase
from .graph import GraphNode
from .llm import LLMNode
from .parallel import ParallelNode
from .switch import SwitchNode, case_key
from .tool import ToolNode
from .update import UpdateNode

KINDS: tuple[type[NodeBase], ...] = (LLMNode, ToolNode, SwitchNode, GraphNode, ParallelNode, UpdateNode)
NODE_KINDS: dict[str, type[NodeBase]] = {k.model_fields["kind"].default: k for k in KINDS}
SELECTORS: tuple[str, ...] = tuple(k.selector for k in KINDS if k.selector)

Node = Union[
    LLMNode, ToolNode, SwitchNode, GraphNode, ParallelNode, UpdateNode
]  # the closed union, for type annotations


def node_kind(raw: dict[str, Any]) -> type[NodeBase] | None:
    """The kind whose selector key the mapping has; the selector-less kind if none; None if several."""
    present = [k for k in KINDS if k.selector and k.selector in raw]
    if len(present) > 1:
        return None
    if present:
        return present[0]
    return next(k for k in KINDS if k.selector is None)


def _kind_of(value: Any) -> str | None:
    """The union tag of a node: its `kind` (plan JSON, model instances), else by selector key (YAML)."""
    if isinstance(value, NodeBase):
        return value.kind
    if isinstance(value, dict):
        if isinstance(value.get("kind"), str):
            return value["kind"]
        cls = node_kind(value)
        return None if cls is None else cls.model_fields["kind"].default
    return None


# The validated node type of graphs and plans: one tagged member per kind of KINDS.
if TYPE_CHECKING:
    AnyNode = Node
else:
    AnyNode = Annotated[
        Union[tuple(Annotated[k, Tag(name)] for name, k in NODE_KINDS.items())], Discriminator(_kind_of)
    ]
PlanNode = AnyNode


__all__ = [
    "KINDS",
    "AnyNode",
    "NODE_KINDS",
    "SELECTORS",
    "AppendTo",
    "FlowNode",
    "Foreach",
    "GraphNode",
    "LLMNode",
    "Node",
    "NodeBase",
    "ParallelNode",
    "PlanNode",
    "SwitchNode",
    "ToolNode",
    "UpdateNode",
    "case_key",
    "node_kind",
]
