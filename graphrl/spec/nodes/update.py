"""The update-only node kind: no call, only state writes (`update:`) and routing (`next:`).

YAML: a node with none of the other kinds' selector keys. Runtime: `graphrl.runtime.handlers.update`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from .base import FlowNode


class UpdateNode(FlowNode):
    selector: ClassVar[str | None] = None
    shape: ClassVar[str] = "dashed"

    kind: Literal["update"] = "update"

    def lines(self) -> list[str]:
        return ["update " + ", ".join(self.update) if self.update else "update"]
