"""Static checks: `Graph` -> diagnostics, all reported at once.

Input: a graph file path (or a loaded `Graph`). Output: a sorted, de-duplicated list of diagnostics.
Each check is a pure function `(Graph, Flow) -> Iterable[Diagnostic]`; `CHECKS` is their tuple.
Invariant: a check never raises for bad input; a bug in a check is reported as such, not hidden.
"""

from __future__ import annotations

from pathlib import Path

from ...spec.diagnostics import Diagnostic, sort_diagnostics
from ...spec.load import Graph, load_graph
from ..flow import build_flow
from . import graph, refs, templates, training

CHECKS = (
    graph.unknown_targets,
    graph.unreachable,
    graph.no_path_to_end,
    graph.unbounded_loops,
    graph.missing_defaults,
    graph.names,
    refs.check_models,
    refs.check_threads,
    refs.check_tools,
    refs.check_rewards,
    templates.check_templates,
    training.trained_frozen,
    training.no_trained,
    training.fanout_settings,
    training.context_overflow,
)


def run_checks(g: Graph) -> list[Diagnostic]:
    flow = build_flow(g)
    out: list[Diagnostic] = []
    for check in CHECKS:
        out.extend(check(g, flow))
    return sort_diagnostics(out)


def check_file(path: str | Path) -> tuple[Graph | None, list[Diagnostic]]:
    g, diags = load_graph(path)
    if g is None:
        return None, sort_diagnostics(diags)
    return g, sort_diagnostics(diags + run_checks(g))
