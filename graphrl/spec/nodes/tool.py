"""The `tool` node kind: one call of a built-in tool or a user `module:function`.

YAML: `tool: NAME`, `args:` (templates), `timeout`, `max_chars`. Runtime: `graphrl.runtime.handlers.tool`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..walk import walk_strings
from .base import FlowNode, Path


class ToolNode(FlowNode):
    selector: ClassVar[str | None] = "tool"
    shape: ClassVar[str] = "tool"

    kind: Literal["tool"] = "tool"
    tool: str = Field(description="built-in tool name or module:function")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments (templates)")
    timeout: float = Field(30.0, gt=0, description="seconds")
    max_chars: int | None = Field(4000, ge=1, description="observation truncation (middle cut)")

    def sites(self) -> Iterator[tuple[Path, str, str]]:
        for path, text in walk_strings(self.args, ("args",)):
            yield path, text, "template"

    def lines(self) -> list[str]:
        return [f"tool · {self.tool}"]
