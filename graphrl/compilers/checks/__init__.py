"""Static checks: `Graph` -> diagnostics, all reported at once.

Input: a graph file path (or a loaded `Graph`). Output: a sorted, de-duplicated list of diagnostics.
Each check is a pure function `(Graph, Flow) -> Iterable[Diagnostic]`; `CHECKS` is their tuple.
`composition.check_subgraphs` then runs them on each `graph` node's child file, recursively.
Invariant: a check never raises for bad input; a bug in a check is reported as such, not hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...spec.diagnostics import Diagnostic, sort_diagnostics
from ...spec.load import Graph, load_graph
from ..flow import build_flow
from ..targets import TARGETS, Target, sections
from . import chat, composition, graph, refs, templates, threads, training

CHECKS = (
    graph.unknown_targets,
    graph.unreachable,
    graph.no_path_to_end,
    graph.unbounded_loops,
    graph.missing_defaults,
    graph.names,
    graph.foreach_over_text,
    graph.parallel_threads,
    composition.check_forks,
    refs.check_models,
    refs.check_threads,
    refs.check_state_writes,
    refs.check_environment,
    refs.check_tools,
    refs.check_rewards,
    refs.check_node_rewards,
    templates.check_templates,
    threads.thread_policies,
    chat.chat_templates,
    chat.completion_mode,
    training.trained_frozen,
    training.no_trained,
    training.context_overflow,
)


def run_checks(g: Graph, targets: Sequence[Target] = TARGETS) -> list[Diagnostic]:
    """Every check, then each target's own checks with the graph's settings for it (or the defaults)."""
    flow = build_flow(g)
    out: list[Diagnostic] = []
    for check in CHECKS:
        out.extend(check(g, flow))
    out.extend(composition.check_subgraphs(g, CHECKS))  # each child file with the same checks
    for t in targets:
        out.extend(t.check(g, flow, g.targets.get(t.name) or t.settings()))
    return sort_diagnostics(out)


def check_file(path: str | Path, targets: Sequence[Target] = TARGETS) -> tuple[Graph | None, list[Diagnostic]]:
    """Load and check a graph file; the targets' sections (e.g. `slime:`) are part of the language."""
    g, diags = load_graph(path, sections=sections(targets))
    if g is None:
        return None, sort_diagnostics(diags)
    return g, sort_diagnostics(diags + run_checks(g, targets))
