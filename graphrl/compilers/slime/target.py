"""slime as a compile target: its graph section (`slime:`), its static checks, its emit.

Input: a checked `Graph` (checks) or a `Plan` (emit). Output: diagnostics (E301 and E407 for
`slime.teacher`, E403); the files of
`emit.write_slime_target`. The runtime side is `graphrl.compilers.slime.adapter:SlimeTarget`,
imported by the emitted module inside slime, never here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from ...plan import Plan
from ...spec.diagnostics import Diagnostic, did_you_mean
from ...spec.load import Graph
from ...spec.model import POLICY
from ..flow import Flow
from ..layout import sample_layout
from .emit import write_slime_target
from .settings import SlimeSettings


class SlimeCompileTarget:
    name: str = "slime"
    settings: type[BaseModel] = SlimeSettings
    runtime_adapter: str = "graphrl.compilers.slime.adapter:SlimeTarget"

    def check(self, g: Graph, flow: Flow, settings: BaseModel) -> Iterator[Diagnostic]:
        """E301 / E407: `teacher` names no declared model / the policy; E403: slime settings that break
        a graph yielding several samples per rollout (fan-out)."""
        assert isinstance(settings, SlimeSettings)
        yield from _check_teacher(g, settings.teacher)
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


def _check_teacher(g: Graph, teacher: str | None) -> Iterator[Diagnostic]:
    if teacher is None:
        return
    frozen = set(g.spec.models) - {POLICY}
    if teacher == POLICY:
        yield Diagnostic(
            "E407",
            "slime.teacher is the policy: on-policy distillation needs another model's log-probs "
            "(the trained model scored by itself gives no signal)",
            g.span("slime", "teacher"),
            "declare the teacher under models: (url: or serve:) and name it here",
        )
    elif teacher not in frozen:
        yield Diagnostic(
            "E301",
            f"teacher model '{teacher}' is not declared",
            g.span("slime", "teacher"),
            did_you_mean(teacher, frozen) or "declare it under models: with a url: or serve:",
        )


SLIME = SlimeCompileTarget()
