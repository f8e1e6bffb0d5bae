"""Compile targets behind one protocol, and the registry of the ones graphrl ships (slime).

Input: a checked `Graph` (target checks) or a lowered `Plan` (emit). Output: diagnostics; files.

A target is: `name` (also the name of its settings section in a graph file, e.g. `slime:`), the
pydantic model of that section (`settings`), static `check`s that need its settings, `emit` (the
files a training framework runs), and `runtime_adapter`, the "module:attr" the emitted code calls
at train time (imported there, never by the compiler). What a rollout's outcome means for
training (statuses, credit, placeholders, eval) is decided once, target-neutrally, by
`graphrl.runtime.outcome.settle`; an adapter only writes its framework's fields.

Invariants: checks and emit never import the runtime (import-linter); a section of a target not in
the registry a graph is loaded with is an unknown key (E002), never silently accepted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from ..plan import Plan
from ..spec.diagnostics import Diagnostic
from ..spec.load import Graph
from .flow import Flow
from .slime.target import SLIME


class Target(Protocol):
    name: str
    settings: type[BaseModel]
    runtime_adapter: str

    def check(self, g: Graph, flow: Flow, settings: BaseModel) -> Iterable[Diagnostic]: ...

    def emit(self, plan: Plan, out_dir: Path) -> list[Path]: ...


TARGETS: tuple[Target, ...] = (SLIME,)


def sections(targets: Sequence[Target]) -> Mapping[str, type[BaseModel]]:
    """The graph sections these targets own: name -> settings model."""
    return {t.name: t.settings for t in targets}


def find_target(name: str, targets: Sequence[Target] = TARGETS) -> Target:
    for t in targets:
        if t.name == name:
            return t
    raise KeyError(f"unknown compile target {name!r}; known: {', '.join(t.name for t in targets)}")
