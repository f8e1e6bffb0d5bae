"""Lowering: a checked `Graph` -> the frozen, self-contained execution plan (`graphrl.plan.Plan`).

Input: a `Graph` that passed `run_checks` with no errors (or a path: `plan_from_path`).
Output: `Plan`; its invariants (self-contained, resolved, deterministic, located) are listed in
`graphrl.plan` and established here.

Invariants: the same inputs (files and the working directory they are named from) give the same
plan; paths are normalised relative to the working directory.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from .. import __version__
from ..plan import Plan, TemplateFile, Training, load_plan
from ..spec.builtins import BUILTIN_REWARDS
from ..spec.diagnostics import Diagnostic, has_errors
from ..spec.load import Graph
from ..spec.model import POLICY, GraphSpec, LLMNode, ModelDecl
from .checks import check_file
from .flow import build_flow
from .layout import DEFAULT_MAX_TOKENS, sample_layout
from .subgraphs import graph_nodes, load_child


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        rel = path
    return Path(rel).as_posix()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _inline_templates(g: Graph) -> tuple[dict[tuple, str], dict[str, TemplateFile]]:
    files: dict[str, TemplateFile] = {}
    inlined: dict[tuple, str] = {}
    for path, src in g.templates.items():
        inlined[path] = src.text
        files[_rel(src.file)] = TemplateFile(sha256=_sha(src.text), lines=len(src.text.splitlines()))
    return inlined, dict(sorted(files.items()))


def _with_files(model: Any, base: tuple, paths: list[tuple], inlined: dict[tuple, str]) -> Any:
    """`model` with the template files its messages name (at `paths` below `base`) replaced by their
    text: the plan is self-contained."""
    files = [(path, inlined[base + path]) for path in paths if base + path in inlined]
    if not files:
        return model
    data = model.model_dump(by_alias=True)
    for path, text in files:
        parent = data
        for p in path[:-1]:
            parent = parent[p]
        parent[path[-1]] = text
    return type(model).model_validate(data)


def _resolve_node(g: Graph, nid: str, inlined: dict[tuple, str]) -> Any:
    node = g.nodes[nid].lowered(default_max_tokens=g.spec.limits.max_tokens or DEFAULT_MAX_TOKENS)
    return _with_files(node, ("nodes", nid), [path for path, _ in node.messages()], inlined)


def _thread_messages(th: Any) -> list[tuple]:
    out: list[tuple] = [("prompt", i, m.role) for i, m in enumerate(th.prompt)]
    if th.summarize is not None:
        out += [("summarize", "prompt", i, m.role) for i, m in enumerate(th.summarize.prompt)]
    return out


def _resolve_reward(spec: GraphSpec):
    """The reward with its training key explicit: a composite reward, and a built-in that returns a
    dict (math_equal: {score, acc, pred, gt}), train on its `score` unless `key` says otherwise (a
    dict reward without a key cannot train: slime needs one number per sample)."""
    r = spec.reward
    if r is None or r.key is not None:
        return r
    if r.terms is not None:
        return r.model_copy(update={"key": "score"})
    builtin = BUILTIN_REWARDS.get(r.fn or "")
    if builtin is not None and builtin.dict_key is not None:
        return r.model_copy(update={"key": builtin.dict_key})
    return r


def _spans(g: Graph) -> dict[str, str]:
    out: dict[str, str] = {}
    for path, span in g.located.spans.items():
        if path:
            out[".".join(str(p) for p in path)] = f"{_rel(span.file)}:{span.line}:{span.col}"
    for path, src in g.templates.items():
        out[".".join(str(p) for p in path)] = f"{_rel(src.file)}:1:1"
    return dict(sorted(out.items()))


def lower(g: Graph, top: Plan | None = None) -> Plan:
    """`top`: lowering a sub-graph of this plan (its models and limits are the top graph's)."""
    inlined, files = _inline_templates(g)
    spec: GraphSpec = g.spec
    threads = {
        tid: _with_files(th, ("threads", tid), _thread_messages(th), inlined) for tid, th in spec.threads.items()
    }
    flow = build_flow(g)
    layout = sample_layout(g, flow)
    models = {name: _with_files(m, ("models", name), [("chat_template",)], inlined) for name, m in spec.models.items()}
    models.setdefault(POLICY, ModelDecl())
    source_text = Path(g.file).read_text(encoding="utf-8")
    for inc in g.includes:  # the plan's hash covers the included files too (resume compares it)
        name = Path(os.path.relpath(inc, Path(g.file).parent)).as_posix()
        source_text += f"\0{name}\0" + Path(inc).read_text(encoding="utf-8")
    for name, file in files.items():  # and the template files: an edited prompt is a new plan
        source_text += f"\0template\0{name}\0{file.sha256}"
    plan = Plan(
        graphrl_version=__version__,
        name=spec.name,
        description=spec.description,
        source={"file": _rel(g.file), "sha256": _sha(source_text)},
        start=g.start,
        constants=dict(spec.constants),
        models=top.models if top is not None else {k: models[k] for k in sorted(models)},
        inputs=dict(spec.inputs),
        state=dict(spec.state),
        threads=threads,
        nodes={nid: _resolve_node(g, nid, inlined) for nid in g.nodes},
        subgraphs=None,
        reward=_resolve_reward(spec),
        environment=spec.environment,
        limits=top.limits if top is not None else spec.limits,
        targets={name: settings.model_dump(mode="json") for name, settings in sorted(g.targets.items())},
        training=Training(
            per_call=layout.per_call,
            threads=layout.threads,
            fanout=layout.fanout,
            trained_nodes=tuple(nid for nid, n in g.nodes.items() if isinstance(n, LLMNode) and n.trained),
        ),
        templates=files,
        spans=_spans(g),
    )
    children = _subgraphs(g, top or plan)
    if not children:
        return plan
    # the plan's hash covers its sub-graph files too (resume compares it): an edited child is a new plan
    digest = _sha(
        plan.source["sha256"] + "".join(f"\0{nid}\0{c.source['sha256']}" for nid, c in sorted(children.items()))
    )
    return plan.model_copy(update={"subgraphs": children, "source": {**plan.source, "sha256": digest}})


def _subgraphs(g: Graph, top: Plan) -> dict[str, Plan]:
    """Each `graph` node's child, lowered on its own (checked with the parent), with the top graph's
    models and limits (a child declares none of its own: E315)."""
    out: dict[str, Plan] = {}
    for nid in graph_nodes(g):
        child, _ = load_child(g, nid)
        if child is None:  # checked before lowering: cannot happen for a graph that passed check
            raise ValueError(f"{g.span('nodes', nid, 'graph')}: sub-graph of '{nid}' does not load")
        out[nid] = lower(child, top)
    return out


def plan_from_path(path: str | Path) -> tuple[Plan | None, list[Diagnostic]]:
    """A graph YAML (checked and lowered) or a compiled plan.json -> (Plan | None, diagnostics)."""
    if str(path).endswith(".json"):
        return load_plan(path), []
    g, diags = check_file(path)
    if g is None or has_errors(diags):
        return None, diags
    return lower(g), diags
