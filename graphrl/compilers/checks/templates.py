"""Template and expression checks: syntax, unbound names, unknown parsed fields.

Input: `Graph` + `Flow`. Output: diagnostics E201-E204, located in the template file (file
templates) or in the YAML string (inline templates), at the template's own line.

Scope rules (the runtime binds exactly these names): inputs, state, `row`, `visits`, `threads`
everywhere; node results of *upstream* nodes (nodes with a path to this one, itself included when
it is on a loop); in a node's own sites `visit`, and its foreach variable + `loop`; `output` only
where the node has run (update, next, append_to); in `inputs.*.from` only the row's fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import networkx as nx
from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError

from ...spec.builtins import TOOL_FIELDS
from ...spec.diagnostics import Diagnostic, did_you_mean
from ...spec.jinja import attribute_refs, make_env, parse_expression, parse_template, unsafe_refs
from ...spec.load import Graph, Site
from ...spec.model import LLMNode, ToolNode
from ...spec.nodes import GraphNode, ParallelNode
from ..flow import Flow

GLOBALS = frozenset({"row", "visits", "threads", "thread_tokens"})
ROW_FIELDS = frozenset({"prompt", "label", "metadata", "row"})
AFTER_RUN = ("update", "next", "append_to", "reward")
LLM_RESULT = frozenset({"text", "ok", "model", "finish_reason", "parse_error", "error"})
TOOL_RESULT = frozenset({"text", "ok", "error"})


def result_fields(node) -> frozenset[str] | None:
    """Fields of a node's result, or None when unknown (custom parser or user tool)."""
    if isinstance(node, LLMNode):
        base = LLM_RESULT | ({"reward"} if node.reward is not None else set())
        if node.parse is None:
            return base
        extra = node.parse.produced_fields()
        return None if extra is None else base | extra
    if isinstance(node, ParallelNode):  # a branch fault caught by the fork's on_error: text "", ok false, error
        return frozenset({"branches", "ok", "text", "error"})
    if isinstance(node, GraphNode):
        return None  # the child's state variables, plus text / ok / status (not checked here)
    if isinstance(node, ToolNode):
        return TOOL_RESULT | frozenset(TOOL_FIELDS.get(node.tool, ())) if ":" not in node.tool else None
    return frozenset()


def _bound(g: Graph, flow: Flow, site: Site, env_globals: frozenset[str], forks: dict[str, str]) -> set[str]:
    if site.path[0] == "inputs":
        return set(ROW_FIELDS) | env_globals
    names = set(GLOBALS) | set(g.spec.constants) | set(g.spec.inputs) | set(g.spec.state) | env_globals
    if site.path[0] == "environment":  # made before any node runs
        return names
    if g.spec.environment is not None:
        names.add("env")  # what the environment's reset() returned
    if site.path[:1] == ("threads",) and site.path[2:3] == ("summarize",):  # the summary call's own names
        names.add("dropped" if site.path[3] == "prompt" else "summary")
    nid = site.node
    if nid is None:  # reward: every node may have run, and the rollout's usage is known
        return names | set(g.nodes) | {"usage"}
    if flow.start in g.nodes and nid != flow.start and not nx.has_path(flow.graph, flow.start, nid):
        names |= set(g.nodes)  # unreachable (E102 says so): do not pile unbound-name errors on top
    names |= nx.ancestors(flow.graph, nid) & set(g.nodes)
    if _on_cycle(flow, nid):
        names.add(nid)
    names.add("visit")
    node = g.nodes[nid]
    if node.foreach:
        names |= {node.foreach.as_, "loop"}
    if site.path[2] in AFTER_RUN:
        names |= {"output", nid}
        if isinstance(node, ParallelNode):  # a fork's update / next run after its branches
            names |= set(node.parallel) & set(g.nodes)
    else:  # branches of one fork run at the same time: before it runs, a branch sees no sibling's result
        names -= set(forks)  # (in a loop a sibling is an ancestor: it would be bound from then on)
    return names


def siblings(g: Graph, nid: str) -> dict[str, str]:
    """The other branches of every fork that runs `nid` as a branch -> that fork's id."""
    return {
        b: fid
        for fid, f in g.nodes.items()
        if isinstance(f, ParallelNode) and nid in f.parallel
        for b in f.parallel
        if b != nid
    }


def _on_cycle(flow: Flow, nid: str) -> bool:
    return any(
        nid in comp and (len(comp) > 1 or flow.graph.has_edge(nid, nid))
        for comp in nx.strongly_connected_components(flow.graph)
    )


def check_templates(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    env = make_env()
    env_globals = frozenset(env.globals)
    for site in g.sites():
        parse = parse_template if site.kind == "template" else parse_expression
        try:
            parsed = parse(env, site.source.text)
        except TemplateSyntaxError as exc:
            code = "E201" if site.kind == "template" else "E203"
            what = "template" if site.kind == "template" else "expression"
            yield Diagnostic(
                code,
                f"{what} syntax error: {exc.message}",
                site.source.span(exc.lineno or 1),
                _syntax_hint(site.source.text)
                if site.kind == "template"
                else "an expression is Jinja without braces, e.g. verifier.conclusion == 'STOP'",
            )
            continue
        forks = siblings(g, site.node) if site.node is not None else {}  # a branch's siblings -> fork
        bound = _bound(g, flow, site, env_globals, forks)
        for name in sorted(parsed.free - bound):
            if name in forks:
                msg = (
                    f"'{name}' is another branch of fork '{forks[name]}': branches run at the same time and "
                    "do not see each other's results"
                )
                hint = f"read '{name}' in the fork's update or next, or in a node after the fork"
            elif name in g.nodes:
                msg = (
                    f"'{name}' is a node that has not run yet here"
                    if name != site.node
                    else f"'{name}' refers to this node's own result, which exists only after it runs"
                )
                hint = "use 'output' in update/next/append_to, or read it from a node upstream"
            elif name == "output":
                msg, hint = "'output' exists only after the node runs", "use it in update, next or append_to"
            elif name == "env" and g.spec.environment is None:
                msg = "'env' is what an environment's reset() returned, and this graph has no environment:"
                hint = (
                    "declare environment: {class: module:Class} (reset() gives env); in a sub-graph, pass what "
                    "it needs from the parent's env through the graph node's inputs:"
                )
            else:
                msg = f"'{name}' is not bound by any input, state variable or upstream node"
                hint = did_you_mean(name, bound) or "declare it under inputs: or state:"
            yield Diagnostic("E202", msg, site.source.span(_line_of(parsed.ast, name), name), hint)
        yield from _fields(g, site, parsed.ast)
        for what, line in unsafe_refs(parsed.ast):
            yield Diagnostic(
                "E205",
                f"'{what}' reaches past the template sandbox: graph templates cannot run Python",
                site.source.span(line, what.strip(".|[]'\"")),
                "templates read values only; to run code, call a module:function tool, parser or reward",
            )


def _syntax_hint(text: str) -> str:
    if re.search(r"\{\{[^}]*\$[A-Za-z_]", text):  # {{ $NAME }}: the $-form is for whole values only
        return "inside a template write a constant by its name, {{ NAME }}; $NAME replaces whole values only"
    return "Jinja syntax: {{ expr }}, {% if %}...{% endif %}"


def _line_of(ast, name: str) -> int:
    for n in ast.find_all(nodes.Name):
        if n.name == name:
            return n.lineno
    return 1


def _fields(g: Graph, site: Site, ast) -> Iterator[Diagnostic]:
    for var, attr, line in attribute_refs(ast):
        target = site.node if var == "output" else var
        if target not in g.nodes:
            continue
        fields = result_fields(g.nodes[target])
        if fields is None or attr in fields or attr.startswith("_"):
            continue
        yield Diagnostic(
            "E204",
            f"node '{target}' has no field '{attr}'",
            site.source.span(line, attr),
            did_you_mean(attr, fields) or f"its fields: {', '.join(sorted(fields))}",
        )
