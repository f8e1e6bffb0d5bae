"""What `graphrl visualize` makes: input file + options -> output text (the command's pure-ish core).

Input: a graph (YAML or plan.json) or a trajectory (graph run JSONL, slime `.pt` dump), an output
format, and options. Output: the text to write (SVG, HTML, DOT, Mermaid, Chrome-trace JSON, text).

Invariants: every failure the user can fix raises `VizError` with a located message and the exit
code to use (2: usage, 3: the input has errors), never a traceback; graph outputs are deterministic;
a trajectory's graph is found by `--graph`, else by its recorded name (graphs/<name>.yaml near the
working directory or the file), else drawn from the paths the rollouts took (with a notice).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..compilers.lower import plan_from_path
from . import textgraph
from .diagram import Diagram, diagram_from_paths, diagram_from_plan
from .html import finite, graph_html, trajectory_html
from .payload import DEFAULT_MAX_TOKENS, build_payload
from .svg import render_svg
from .textview import text_view
from .tokens import TokenizerUnavailable, load_vocab
from .trace import chrome_trace
from .trajectory import MissingTorch, TrajectoryError, load_trajectory

EXIT_USAGE, EXIT_INVALID = 2, 3
GRAPH_FORMATS = ("svg", "html", "dot", "mermaid", "text")
TRAJ_FORMATS = ("html", "chrome-trace", "text")
EXTENSIONS = {
    ".svg": "svg",
    ".html": "html",
    ".htm": "html",
    ".dot": "dot",
    ".gv": "dot",
    ".mmd": "mermaid",
    ".json": "chrome-trace",
    ".txt": "text",
}


class VizError(Exception):
    def __init__(self, message: str, code: int = EXIT_USAGE, diagnostics: list | None = None):
        super().__init__(message)
        self.code = code
        self.diagnostics = diagnostics or []


def input_kind(path: Path) -> str:
    """'graph' or 'trajectory', from the file name (and, for .json, the plan format marker)."""
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "graph"
    if suffix in (".jsonl", ".pt"):
        return "trajectory"
    if suffix == ".json":
        try:
            head = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise VizError(f"{path}: not valid JSON: {exc}", EXIT_INVALID) from None
        if isinstance(head, dict) and str(head.get("format", "")).startswith("graphrl.plan/"):
            return "graph"
        raise VizError(
            f"{path}: a .json input must be a compiled plan (graphrl compile); "
            "trajectories are .jsonl (graphrl run) or .pt (slime debug dumps)"
        )
    raise VizError(
        f"{path}: cannot tell what this is from '{suffix or 'no extension'}': expected a graph "
        "(.yaml, .yml, plan.json) or a trajectory (.jsonl from graphrl run, .pt slime debug dump)"
    )


def output_format(out: str | None, fmt: str, kind: str) -> str:
    allowed = GRAPH_FORMATS if kind == "graph" else TRAJ_FORMATS
    if fmt == "auto":
        if out is None:
            return "text"
        suffix = Path(out).suffix.lower()
        guessed = EXTENSIONS.get(suffix)
        if guessed is None or guessed not in allowed:
            exts = sorted(k for k, v in EXTENSIONS.items() if v in allowed)
            raise VizError(
                f"cannot tell the output format from '{out}': for a {kind} use "
                f"{', '.join(exts)}, or --format {{{','.join(allowed)}}}"
            )
        fmt = guessed
    if fmt not in allowed:
        raise VizError(f"--format {fmt} is not available for a {kind}; choose one of {', '.join(allowed)}")
    if out is None and fmt == "html":
        raise VizError("--format html needs -o OUT.html")
    return fmt


def load_plan(path: Path):
    try:
        plan, diags = plan_from_path(path)
    except ValidationError as exc:
        raise VizError(f"{path}: not a valid plan file: {str(exc).splitlines()[0]}", EXIT_INVALID) from None
    if plan is None:
        raise VizError(f"{path}: the graph has errors", EXIT_INVALID, diags)
    return plan


def graph_output(path: Path, fmt: str, engine: str = "builtin") -> str:
    d = diagram_from_plan(load_plan(path))
    if fmt == "dot":
        return textgraph.to_dot(d)
    if fmt == "mermaid":
        return textgraph.to_mermaid(d)
    if fmt == "text":
        return textgraph.to_text(d)
    if engine == "graphviz":
        try:
            svg = textgraph.graphviz_svg(textgraph.to_dot(d))
        except textgraph.GraphvizMissing:
            raise VizError(
                "--engine graphviz needs Graphviz's `dot` (apt-get install graphviz); "
                "the default --engine builtin needs nothing"
            ) from None
    else:
        svg = render_svg(d)
    return graph_html(d.name, svg) if fmt == "html" else svg


def _candidates(name: str, traj_path: Path) -> list[Path]:
    out = [Path("graphs") / f"{name}.yaml", Path("graphs") / f"{name}.yml"]
    for base in [traj_path.resolve().parent, *list(traj_path.resolve().parents)[:3]]:
        out += [base / f"{name}.yaml", base / "graphs" / f"{name}.yaml"]
    return out


def find_plan(traj, traj_path: Path, explicit: str | None) -> tuple[Any, list[str]]:
    """The trajectory's graph as a Plan (or None) and notices about how it was found."""
    if explicit:
        return load_plan(Path(explicit)), []
    if not traj.graph:
        return None, ["the trajectory does not name its graph; pass --graph PATH to draw it"]
    for cand in _candidates(traj.graph, traj_path):
        if cand.is_file():
            try:
                plan = load_plan(cand)
            except VizError as exc:
                return None, [f"found {cand} but it has errors ({exc}); drawing the paths taken instead"]
            notes = []
            if traj.plan_sha256 and plan.source.get("sha256") not in (None, traj.plan_sha256):
                notes.append(f"{cand} has changed since this run (sha256 differs); the diagram may not match")
            return plan, notes
    return None, [
        f"graph '{traj.graph}' not found (looked for graphs/{traj.graph}.yaml here and near the file); "
        "pass --graph PATH; drawing the transitions the rollouts took instead"
    ]


def _observed_diagram(traj) -> Diagram:
    roles: dict[str, str] = {}
    endpoints: dict[str, str] = {}
    ends: dict[str, str] = {}
    paths = []
    for r in traj.rollouts:
        path = list(r.path)
        if not path:  # no recorded path (e.g. a slime dump without graphrl metadata): the span order
            for s in r.samples:
                for node, visit, *_ in s.spans:
                    if (node, visit) not in path:
                        path.append((node, visit))
        paths.append(path)
        if path and r.status != "failed":
            ends[path[-1][0]] = "abort" if r.status == "aborted" else "end"
        for s in r.samples:
            for node, _v, _a, _b, mask, _k in s.spans:
                roles[node] = "trained" if mask or roles.get(node) == "trained" else "masked"
        for c in r.calls:
            endpoints.setdefault(str(c.get("node")), str(c.get("endpoint", "")))
    for node, ep in endpoints.items():
        if node not in roles:
            roles[node] = "frozen" if ep and not ep.startswith("tool:") else "none"
    return diagram_from_paths(traj.graph or "trajectory", paths, roles, endpoints, ends)


def load_selected(path: Path, group: int | None, sample: int | None):
    try:
        traj = load_trajectory(path)
    except MissingTorch as exc:
        raise VizError(str(exc), 4) from None
    except TrajectoryError as exc:
        raise VizError(str(exc), EXIT_INVALID) from None
    if group is not None and group not in traj.groups():
        have = traj.groups()
        raise VizError(
            f"group {group} is not in {path} (it has {len(have)} group(s): "
            f"{', '.join(map(str, have[:20]))}{' ...' if len(have) > 20 else ''})"
        )
    if sample is not None:
        ns = sorted({r.n for r in traj.rollouts if group is None or r.group == group})
        if sample not in ns:
            raise VizError(
                f"sample {sample} is not in {'group %d of ' % group if group is not None else ''}{path} "
                f"(samples: {', '.join(map(str, ns))})"
            )
    return traj, traj.select(group, sample)


def trajectory_output(
    path: Path,
    fmt: str,
    *,
    graph: str | None = None,
    group: int | None = None,
    sample: int | None = None,
    tokenizer: str | None = None,
    max_tokens: int | None = None,
    color: bool = True,
    show_prompt: bool = False,
) -> str:
    full, traj = load_selected(path, group, sample)
    if fmt == "chrome-trace":
        return json.dumps(finite(chrome_trace(traj)), indent=1, allow_nan=False) + "\n"
    try:
        vocab, note = load_vocab(tokenizer, full.tokenizer)
    except TokenizerUnavailable as exc:
        raise VizError(str(exc)) from None
    notices = list(full.notes) + ([note] if note else [])
    if fmt == "text":
        return text_view(
            traj, vocab, color=color, max_tokens=max_tokens or 2000, show_prompt=show_prompt, notices=tuple(notices)
        )

    plan, found = find_plan(full, path, graph)
    notices += found
    diagram = diagram_from_plan(plan) if plan is not None else _observed_diagram(full)
    roles = {n.id: n.role for n in diagram.nodes if n.role != "terminal"}
    order = [n.id for n in diagram.nodes if n.role != "terminal"]  # token colours follow the graph's node order
    payload = build_payload(
        traj,
        vocab,
        order,
        roles=roles,
        max_tokens=max_tokens or DEFAULT_MAX_TOKENS,
        notices=notices,
        selected=(group, sample),
    )
    svg = render_svg(diagram, legend=False) if len(diagram.nodes) > 1 else None
    return trajectory_html(payload, svg)
