"""The `switch` node kind: route on the value of an expression (`cases`, then `default`).

YAML: `switch: EXPR`, `cases: {value: node}`, `default: node`. Runtime: `graphrl.runtime.handlers.switch`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from .base import NodeBase, Path


def case_key(value: Any) -> str:
    """The case a value selects: YAML/Jinja booleans as `true`/`false`, everything else as its text."""
    return str(value).lower() if isinstance(value, bool) else str(value)


class SwitchNode(NodeBase):
    selector: ClassVar[str | None] = "switch"
    shape: ClassVar[str] = "hexagon"

    kind: Literal["switch"] = "switch"
    switch: str = Field(description="expression whose value picks a case")
    cases: dict[str, str] = Field(min_length=1)
    default: str | None = None

    @field_validator("cases", mode="before")
    @classmethod
    def _str_keys(cls, v: Any) -> Any:
        return {case_key(k): t for k, t in v.items()} if isinstance(v, dict) else v

    def sites(self) -> Iterator[tuple[Path, str, str]]:
        yield ("switch",), self.switch, "expression"

    def edges(self) -> Iterator[tuple[Path, str, str]]:
        for value, target in self.cases.items():
            yield ("cases", value), target, f"case {value}"
        if self.default is not None:
            yield ("default",), self.default, "default"

    def lines(self) -> list[str]:
        return [f"switch {self.switch}"]
