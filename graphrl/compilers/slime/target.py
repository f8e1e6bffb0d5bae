"""slime as a compile target: its graph section (`slime:`), its static checks, its emit.

Input: a checked `Graph` (checks) or a `Plan` (emit). Output: diagnostics (E403); the files of
`emit.write_slime_target`. The runtime side is `graphrl.compilers.slime.adapter:SlimeTarget`,
imported by the emitted module inside slime, never here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from ...plan import Plan
from ...spec.diagnostics import Diagnostic
from ...spec.load import Graph
from ..flow import Flow
from ..layout import sample_layout
from .emit import write_slime_target
from .settings import SlimeSettings


class SlimeCompileTarget:
    name: str = "slime"
    settings: type[BaseModel] = SlimeSettings
    runtime_adapter: str = "graphrl.compilers.slime.adapter:SlimeTarget"

    def check(self, g: Graph, flow: Flow, settings: BaseModel) -> Iterator[Diagnostic]:
        """E403: slime settings that break a graph yielding several samples per rollout (fan-out)."""
        assert isinstance(settings, SlimeSettings)
        layout = sample_layout(g, flow)
        if not layout.fanout:
            return
        hint = "remove it; graphrl's compiled reward post-process normalises per prompt group"
        if layout.drift:
            hint += "; or, if only a rewritten history makes several samples, set on_drift: fail on thread " + (
                ", ".join(f"'{t}'" for t in layout.drift)
            )
        bad = [
            ("partial_rollout", settings.partial_rollout, "ABORTED siblings cannot re-enter generate as one sample"),
            ("group_rm", settings.group_rm, "slime's group RM expects one sample per rollout"),
            ("dynamic_sampling_filter", bool(settings.dynamic_sampling_filter), "filters count samples, not rollouts"),
        ]
        for key, on, why in bad:
            if on:
                yield Diagnostic(
                    "E403",
                    f"this graph yields several training samples per rollout (fan-out); "
                    f"slime's {key} breaks that: {why}",
                    g.span("slime", key),
                    hint,
                )

    def emit(self, plan: Plan, out_dir: Path) -> list[Path]:
        return write_slime_target(plan, out_dir)


SLIME = SlimeCompileTarget()
