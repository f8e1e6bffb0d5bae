"""The `parallel` node kind: run several nodes (branches) concurrently, at most `max` at a time.

YAML: `parallel: [a, b, c]`, `max: N`, `next:`. Each branch runs one visit of its node (a `graph`
node runs a whole sub-graph); every branch of a batch sees the state as it was before the batch;
their results, state writes, appends and samples are applied in listed order; then the fork
follows its own `next`. Checks: `graphrl.compilers.checks.subgraphs`; runtime:
`graphrl.runtime.handlers.parallel`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar, Literal

from pydantic import Field

from .base import FlowNode, Path


class ParallelNode(FlowNode):
    selector: ClassVar[str | None] = "parallel"
    shape: ClassVar[str] = "hexagon"

    kind: Literal["parallel"] = "parallel"
    parallel: list[str] = Field(min_length=1, description="the branch nodes, run concurrently, applied in this order")
    max: int | None = Field(None, ge=1, description="branches run at a time (default: all)")

    def edges(self) -> Iterator[tuple[Path, str, str]]:
        for i, branch in enumerate(self.parallel):
            yield ("parallel", i), branch, "branch"
        yield from super().edges()

    def lines(self) -> list[str]:
        width = f" · {self.max} at a time" if self.max and self.max < len(self.parallel) else ""
        return [f"parallel · {len(self.parallel)} branches{width}"]
