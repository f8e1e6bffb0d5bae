"""Composition checks: sub-graph files (`graph:` nodes) and parallel forks (`parallel:` nodes).

Input: `Graph` + `Flow`. Output: diagnostics E312-E317, and every diagnostic of each child graph
(located in the child's file: the child is loaded and checked in full, recursively).

Rules: a child file is found and confined (E312, `compilers.subgraphs`); a file that includes
itself, directly or through others, is E313; the node's `inputs:` name only inputs the child
declares and give every required one (E314, with did-you-mean); a child declares no reward,
environment, limits or target section and only models the parent declares too (E315: the rollout's
reward, limits and models are the top graph's); `<graph node>.<field>` names one of the child's
state variables or text / ok / status / error (E204). A fork's branches are plain nodes run once each by
that fork only (no next / on_error / on_limit / foreach, not a switch or a fork, not reached from
anywhere else: E316), and no two branches of one fork continue one thread (E317).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from jinja2.exceptions import TemplateSyntaxError

from ...spec.diagnostics import Diagnostic, did_you_mean
from ...spec.jinja import attribute_refs, make_env, parse_expression, parse_template
from ...spec.load import Graph
from ...spec.model import POLICY, Limits
from ...spec.nodes import GraphNode, LLMNode, ParallelNode, SwitchNode
from ..flow import Flow, build_flow
from ..subgraphs import child_path, graph_nodes, load_child, resolved

Check = Callable[[Graph, Flow], Iterable[Diagnostic]]


def check_subgraphs(g: Graph, checks: Sequence[Check]) -> Iterator[Diagnostic]:
    """The rules above for each `graph` node of `g`, and `checks` (and these rules) on each child."""
    yield from _check_children(g, (resolved(g.file),), checks)


def _check_children(g: Graph, stack: tuple[Path, ...], checks: Sequence[Check]) -> Iterator[Diagnostic]:
    for nid in graph_nodes(g):
        node = g.nodes[nid]
        assert isinstance(node, GraphNode)
        path = child_path(g, nid)
        real = resolved(path) if path is not None else None  # an inline group is in g's own file
        if real is not None and real in stack:
            chain = " -> ".join(p.name for p in stack[stack.index(real) :]) + f" -> {real.name}"
            yield Diagnostic(
                "E313",
                f"sub-graph '{node.graph}' includes itself ({chain})",
                g.span("nodes", nid, "graph"),
                "a graph cannot run itself as a sub-graph: loop with next: and max_visits instead",
            )
            continue
        child, diags = load_child(g, nid)
        yield from diags
        if child is None:
            continue
        cflow = build_flow(child)
        for check in checks:
            yield from check(child, cflow)
        yield from _check_children(child, stack + ((real,) if real is not None else ()), checks)
        yield from _child_sections(g, nid, child)
        yield from _input_mapping(g, nid, node, child)
        yield from _result_fields(g, nid, child)


def _child_sections(g: Graph, nid: str, child: Graph) -> Iterator[Diagnostic]:
    why = "a sub-graph runs inside the parent's rollout: "
    for key, what in (("reward", "the rollout's reward"), ("environment", "the rollout's environment")):
        if getattr(child.spec, key) is not None:
            yield Diagnostic(
                "E315",
                f"sub-graph '{child.spec.name}' declares {key}:, which only the top graph may",
                child.span(key, key=True),
                why + f"{what} is the top graph's (node rewards: reward: on an llm node)",
            )
    if child.spec.limits != Limits():
        yield Diagnostic(
            "E315",
            f"sub-graph '{child.spec.name}' declares limits:, which only the top graph may",
            child.span("limits", key=True),
            why + "the top graph's limits bound it (its steps and tokens count there); bound loops with max_visits",
        )
    for name in child.targets:
        yield Diagnostic(
            "E315",
            f"sub-graph '{child.spec.name}' has a {name}: section, which only the top graph may",
            child.span(name, key=True),
            why + "training settings are the top graph's",
        )
    parent_models = set(g.spec.models) | {POLICY}
    for name in child.spec.models:
        if name not in parent_models:
            yield Diagnostic(
                "E315",
                f"sub-graph '{child.spec.name}' uses model '{name}', which '{g.spec.name}' does not declare",
                child.span("models", name, key=True),
                did_you_mean(name, parent_models)
                or f"declare '{name}' under models: in {Path(g.file).name} (a sub-graph runs on the parent's models)",
            )


def _input_mapping(g: Graph, nid: str, node: GraphNode, child: Graph) -> Iterator[Diagnostic]:
    declared = child.spec.inputs
    for name in node.inputs:
        if name not in declared:
            yield Diagnostic(
                "E314",
                f"sub-graph {_label(nid, node)} has no input '{name}'",
                g.span("nodes", nid, "inputs", name, key=True),
                did_you_mean(name, declared) or f"its inputs: {', '.join(declared) or 'none'}",
            )
    for name, decl in declared.items():
        if decl.required and decl.default is None and name not in node.inputs:
            yield Diagnostic(
                "E314",
                f"node '{nid}' does not give sub-graph {_label(nid, node)} its required input '{name}'",
                g.span("nodes", nid, "inputs", key=True) or g.span("nodes", nid, "graph"),
                f"add inputs: {{{name}: '{{{{ ... }}}}'}} (or give the input a default in the sub-graph)",
            )


def _label(nid: str, node: GraphNode) -> str:
    return f"'{node.graph}'" if isinstance(node.graph, str) else f"'{nid}' (inline)"


RESULT = frozenset({"text", "ok", "status", "error"})


def _result_fields(g: Graph, nid: str, child: Graph) -> Iterator[Diagnostic]:
    """E204 for `<graph node>.<name>` where the child has no state variable `name` (nor a result key)."""
    env = make_env()
    fields = RESULT | set(child.spec.state)
    for site in g.sites():
        parse = parse_template if site.kind == "template" else parse_expression
        try:
            ast = parse(env, site.source.text).ast
        except TemplateSyntaxError:
            continue  # E201 / E203 say so
        for var, attr, line in attribute_refs(ast):
            target = site.node if var == "output" else var
            if target == nid and attr not in fields and not attr.startswith("_"):
                yield Diagnostic(
                    "E204",
                    f"node '{nid}' has no field '{attr}': sub-graph '{child.spec.name}' has no state variable '{attr}'",
                    site.source.span(line, attr),
                    did_you_mean(attr, fields) or f"its fields: {', '.join(sorted(fields))}",
                )


def check_forks(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    owner: dict[str, str] = {}
    for pid, p in g.nodes.items():
        if not isinstance(p, ParallelNode):
            continue
        if p.foreach is not None:
            yield Diagnostic(
                "E316",
                f"fork '{pid}' has foreach:, which a fork cannot run",
                g.span("nodes", pid, "foreach", key=True),
                "put the foreach on a branch's graph node, or fork inside a sub-graph run per item",
            )
        threads: dict[str, str] = {}
        for i, b in enumerate(p.parallel):
            where = g.span("nodes", pid, "parallel", i)
            n = g.nodes.get(b)
            if n is None:
                continue  # E101 reports unknown branches
            problem = _branch_problem(g, flow, pid, b, owner)
            if problem is not None:
                yield Diagnostic("E316", f"branch '{b}' of fork '{pid}' {problem[0]}", where, problem[1])
            owner.setdefault(b, pid)
            thread = n.thread if isinstance(n, LLMNode) else None
            if thread is not None:
                if thread in threads:
                    yield Diagnostic(
                        "E317",
                        f"branches '{threads[thread]}' and '{b}' of fork '{pid}' both continue thread "
                        f"'{thread}': a thread's calls follow one another",
                        g.span("nodes", b, "thread"),
                        "give one of them a fresh prompt: (or its own thread), or run them one after the other",
                    )
                else:
                    threads[thread] = b


def _branch_problem(g: Graph, flow: Flow, pid: str, b: str, owner: dict[str, str]) -> tuple[str, str] | None:
    n = g.nodes[b]
    one = "a branch runs one visit of one node and returns to the fork"
    if b == pid:
        return "is the fork itself", one
    if isinstance(n, (SwitchNode, ParallelNode)):
        return f"is a {n.kind} node", one + ": to run several nodes per branch, make it a graph: node (a sub-graph)"
    for key in ("next", "on_error", "on_limit", "foreach"):
        if getattr(n, key, None) is not None:
            return f"has {key}:", one + f"; remove {key}: (the fork's own keys say what comes after the branches)"
    if b in owner:
        if owner[b] == pid:
            return "is listed twice", one + ": list it once"
        return f"is also a branch of '{owner[b]}'", one + ": give each fork its own branch nodes"
    others = sorted({r.source or "start" for r in flow.refs if r.target == b and r.label != "branch"})
    if others:
        return f"is also reached from {', '.join(repr(o) for o in others)}", one + ": only its fork runs it"
    return None
