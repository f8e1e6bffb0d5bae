"""Graph file -> `Graph` (typed, frozen, every value located), or diagnostics.

Input: a path to a graph YAML file.
Output: `(Graph | None, diagnostics)`. A Graph is returned whenever the file parsed and validated
(warnings and later-stage errors are for `graphrl.compilers.checks`); schema-level problems
(YAML syntax, unknown keys, wrong types, duplicates, missing template files) are all reported at once.

Invariants: template files are read here and nowhere else (the plan inlines them); spans point at
the YAML (or at the template file for file templates); no user code is imported here.
"""

from __future__ import annotations

import copy
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .constants import substitute_constants
from .desugar import desugar
from .diagnostics import Diagnostic, SourceCache, Span, did_you_mean
from .includes import expand_includes
from .model import GraphSpec, Message, Node
from .nodes import SELECTORS, UpdateNode, node_kind
from .template_files import TemplateRefused, read_template
from .walk import walk_strings
from .yamlsrc import Located, load_yaml

TEMPLATE_FILE = re.compile(r"^[^\s{}]+\.(j2|jinja|jinja2)$")


@dataclass(frozen=True)
class TemplateSource:
    """Where a template's text came from: a .j2 file, or an inline YAML string."""

    text: str
    file: str  # the template file, or the graph file for inline templates
    line: int  # line of the template's first line in `file`
    col: int  # column of its first character (1 for files and block scalars)
    inline: bool
    block: bool = False  # a YAML | or > block: every line starts at `col` (its indentation is stripped)
    flat: bool = False  # a scalar on one line of the file: its line breaks are escapes ("a\nb")

    def span(self, template_line: int = 1, needle: str | None = None) -> Span:
        """The span of a template line; with `needle`, of its first whole-word occurrence there (in a
        flat scalar: in the scalar's one line)."""
        line = self.line if self.flat else self.line + max(template_line, 1) - 1
        col = self.col if template_line <= 1 or self.block or self.flat else 1
        if needle:
            text = SourceCache().line(self.file, line) or ""
            m = re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", text[col - 1 :])
            if m:
                return Span(self.file, line, col + m.start(), col + m.end())
        return Span(self.file, line, col)


@dataclass(frozen=True)
class Site:
    """A string in the graph that holds Jinja: a template (rendered) or a bare expression."""

    path: tuple
    kind: str  # "template" | "expression"
    source: TemplateSource
    node: str | None  # the node it belongs to, if any


@dataclass(frozen=True)
class Graph:
    spec: GraphSpec
    nodes: dict[str, Node]
    file: str
    located: Located = field(repr=False, compare=False)
    templates: dict[tuple, TemplateSource] = field(repr=False, compare=False)  # path -> source
    targets: dict[str, BaseModel] = field(default_factory=dict)  # a compile target's section, by its name
    includes: tuple[str, ...] = ()  # YAML files merged in by include:, in the order read

    @property
    def base_dir(self) -> Path:
        return Path(self.file).parent

    def span(self, *path: Any, key: bool = False) -> Span | None:
        return self.located.span(tuple(path), key=key)

    @property
    def start(self) -> str:
        return self.spec.start or next(iter(self.nodes))

    def sites(self) -> Iterator[Site]:
        """Every template and expression site, in document order."""
        yield from _sites(self)


# ---------------------------------------------------------------- pydantic errors -> diagnostics


def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return [t for a in typing.get_args(tp) for t in _unwrap(a)]
    return [tp]


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Keys allowed at `loc` (a pydantic error location) under `model`, for 'did you mean'."""
    current: list[Any] = [model]
    for part in loc:
        nxt: list[Any] = []
        for tp in current:
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                for name, f in tp.model_fields.items():
                    if part in (name, f.alias):
                        nxt.extend(_unwrap(f.annotation))
            elif typing.get_origin(tp) in (list, dict):
                nxt.extend(_unwrap(typing.get_args(tp)[-1]))
        current = nxt
    keys: list[str] = []
    for tp in current:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            keys += [f.alias or n for n, f in tp.model_fields.items() if n != "kind"]
    return keys


def _doc_loc(doc: Any, loc: tuple) -> tuple:
    """A pydantic error location as a path into `doc`: union tags ('list[str]') are dropped unless
    they are real keys, and keys pydantic reports as strings ('None', '5') map back to the YAML key."""
    out: list[Any] = []
    cur: Any = doc
    for p in loc:
        if isinstance(cur, dict):
            key = p if p in cur else next((k for k in cur if str(k) == str(p)), _MISSING)
            if key is not _MISSING:
                out.append(key)
                cur = cur[key]
                continue
        elif isinstance(cur, list) and isinstance(p, int) and 0 <= p < len(cur):
            out.append(p)
            cur = cur[p]
            continue
        if isinstance(p, str) and "[" in p:
            continue
        out.append(p)
        cur = None
    return tuple(out)


_MISSING = object()


def _pydantic_diagnostics(
    exc: ValidationError, model: type[BaseModel], prefix: tuple, loc_: Located, doc: Any, extra_keys: Iterable[str] = ()
) -> list[Diagnostic]:
    out = []
    for err in exc.errors():
        loc = _doc_loc(doc, tuple(err["loc"]))
        path = prefix + loc
        typ = err["type"]
        if typ == "extra_forbidden":
            key = loc[-1] if loc else "?"
            allowed = _allowed_keys(model, loc[:-1]) + (list(extra_keys) if len(loc) == 1 else [])
            hint = did_you_mean(str(key), allowed) or (
                f"allowed keys here: {', '.join(sorted(allowed))}" if allowed else None
            )
            out.append(Diagnostic("E002", f"unknown key '{key}'", loc_.span(path, key=True), hint))
        elif typ == "missing":
            key = loc[-1] if loc else "?"
            out.append(
                Diagnostic(
                    "E006",
                    f"missing required key '{key}'",
                    loc_.span(path[:-1], key=True),
                    f"add '{key}:' here"
                    + (
                        " (a file of shared sections that graphs `include:` is checked through the graph that "
                        "includes it)"
                        if path == ("name",)
                        else ""
                    ),
                )
            )
        else:
            where = ".".join(str(p) for p in path) or "value"  # the whole key path: nodes.fork.max
            msg = err["msg"].removeprefix("Value error, ")
            on_key = typ == "invalid_key" or err["loc"][-1:] == ("[key]",)  # the key itself is wrong
            hint = None
            if on_key:
                msg = f"keys must be strings, not {type(loc[-1]).__name__ if loc else 'this'}"
                hint = "quote the key"
            elif typ in ("literal_error", "enum") and isinstance(err.get("input"), str):
                options = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", "")))
                hint = did_you_mean(err["input"], options)  # on_overflow: summarise -> 'summarize'
            span = loc_.span(path, key=on_key)
            if (
                hint is None
                and span is not None
                and (SourceCache().line(span.file, span.line) or "")[span.col - 1 :].startswith("{{")
            ):
                # YAML reads an unquoted {{ ... }} as a mapping inside a mapping, not as text
                hint = "quote a value that starts with '{{': \"{{ ... }}\" (unquoted, YAML reads it as a mapping)"
            out.append(Diagnostic("E003", f"{where}: {msg}", span, hint))
    return out


# ---------------------------------------------------------------- loading

MAX_GRAPH_BYTES = 4 << 20  # a graph file larger than 4 MiB is refused before it is parsed


def load_graph(
    path: str | Path, *, sections: Mapping[str, type[BaseModel]] | None = None
) -> tuple[Graph | None, list[Diagnostic]]:
    """`sections`: top-level keys owned by compile targets (e.g. `slime`), each with its settings
    model; they are validated here with located errors, and any other unknown key is E002."""
    file = str(path)
    try:
        with open(path, "rb") as fh:  # bounded: /dev/zero or a generated 1 GB file is refused, not read whole
            data = fh.read(MAX_GRAPH_BYTES + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [
            Diagnostic("E007", f"cannot read graph file: {getattr(exc, 'strerror', None) or exc}", Span(file, 1, 1))
        ]
    if len(data) > MAX_GRAPH_BYTES:
        return None, [
            Diagnostic(
                "E007",
                f"graph file is larger than {MAX_GRAPH_BYTES} bytes",
                Span(file, 1, 1),
                hint="a graph is a few KB of YAML: move prompts into template files and data into the dataset",
            )
        ]
    loc = load_yaml(text, file)
    return graph_from_located(loc, sections=sections)


def graph_from_located(
    loc: Located, *, sections: Mapping[str, type[BaseModel]] | None = None
) -> tuple[Graph | None, list[Diagnostic]]:
    """A parsed graph document -> Graph: a file's, or an inline sub-graph's (its spans in the parent's file)."""
    file = loc.file
    diags = list(loc.diagnostics)
    if any(d.code == "E001" for d in diags):
        return None, diags
    if not isinstance(loc.value, dict):
        diags.append(Diagnostic("E003", "a graph file is a mapping with name: and nodes:", loc.span(())))
        return None, diags
    include_diags, included = expand_includes(loc, Path(file).parent)
    diags += include_diags
    if any(d.code in ("E001", "E008") for d in include_diags):
        return None, diags
    doc, const_diags = substitute_constants(desugar(loc.value), loc)
    diags += const_diags
    sections = dict(sections or {})
    targets: dict[str, BaseModel] = {}
    for name, model in sections.items():
        if name not in doc:
            continue
        raw_section = doc[name]
        doc = {k: v for k, v in doc.items() if k != name}
        try:
            targets[name] = model.model_validate({} if raw_section is None else raw_section)
        except ValidationError as exc:
            diags += _pydantic_diagnostics(exc, model, (name,), loc, raw_section)
    nodes: dict[str, Node] = {}
    node_diags: list[Diagnostic] = []
    for nid, raw in (doc.get("nodes") or {}).items() if isinstance(doc.get("nodes"), dict) else ():
        if not isinstance(raw, dict):
            node_diags.append(Diagnostic("E003", f"node '{nid}' must be a mapping", loc.span(("nodes", nid))))
            continue
        cls = node_kind(raw)
        if cls is None:
            node_diags.append(
                Diagnostic(
                    "E003",
                    f"node '{nid}' has more than one of {'/'.join(SELECTORS)}",
                    loc.span(("nodes", nid), key=True),
                    "split it into one node per action",
                )
            )
            continue
        try:
            nodes[str(nid)] = cls.model_validate(raw)  # type: ignore[assignment]
        except ValidationError as exc:
            node_diags += _pydantic_diagnostics(exc, cls, ("nodes", nid), loc, raw)
            node = _without_unknown_keys(cls, raw, exc)
            if node is not None:
                nodes[str(nid)] = node  # type: ignore[assignment]
    # The graph as a whole, with the nodes validated above (each node's errors are reported once,
    # located at the node; a node that did not validate stands in as an empty update node).
    raw_nodes = doc.get("nodes")
    if isinstance(raw_nodes, dict):
        doc = {**doc, "nodes": {nid: nodes.get(str(nid), UpdateNode()) for nid in raw_nodes}}
    spec = None
    try:
        spec = GraphSpec.model_validate(doc)
    except ValidationError as exc:
        diags += _pydantic_diagnostics(exc, GraphSpec, (), loc, doc, extra_keys=sections)
        spec = _without_unknown_keys(GraphSpec, doc, exc)
    diags += node_diags  # graph-level problems first, then each node's
    # a `$NAME` that names no constant was reported (E308); its leftover string is no second error
    unresolved = {d.span for d in const_diags}
    diags = [d for d in diags if not (d.code == "E003" and d.span in unresolved)]
    only_unknown_keys = all(d.code in ("E002",) or d.severity != "error" for d in diags)
    if spec is None or not only_unknown_keys or len(nodes) != len(doc.get("nodes") or {}):
        return None, diags
    templates = _read_template_files(spec, nodes, file, loc, diags)
    if any(d.code != "E002" and d.severity == "error" for d in diags):
        return None, diags
    # With only unknown keys wrong, the graph (those keys dropped) is still analysed, so that every
    # problem is reported at once; callers treat any error diagnostic as failure.
    graph = Graph(spec=spec, nodes=nodes, file=file, located=loc, templates=templates, targets=targets)
    return (replace(graph, includes=tuple(included)) if included else graph), diags


def _without_unknown_keys(model: type[BaseModel], doc: Any, exc: ValidationError) -> Any:
    """Validate again with the unknown keys removed; None if other errors remain."""
    errors = exc.errors()
    if any(e["type"] != "extra_forbidden" for e in errors):
        return None

    doc = copy.deepcopy(doc)
    for e in errors:
        parent = doc
        loc = list(_doc_loc(doc, tuple(e["loc"])))
        try:
            for p in loc[:-1]:
                parent = parent[p]
            del parent[loc[-1]]
        except (KeyError, IndexError, TypeError):
            return None
    try:
        return model.model_validate(doc)
    except ValidationError:
        return None


def _messages(spec: GraphSpec, nodes: dict[str, Node]) -> Iterator[tuple[tuple, Message]]:
    for tid, th in spec.threads.items():
        for i, m in enumerate(th.prompt):
            yield ("threads", tid, "prompt", i, m.role), m
        if th.summarize is not None:
            for i, m in enumerate(th.summarize.prompt):
                yield ("threads", tid, "summarize", "prompt", i, m.role), m
    for nid, n in nodes.items():
        for path, m in n.messages():
            yield ("nodes", nid, *path), m


def _source_path(loc: Located, path: tuple, text: str) -> tuple:
    """The located path of the string at `path`: a desugared shorthand (`prompt: "..."` ->
    prompt.0.messages) lives at a prefix of it in the YAML."""
    if path in loc.spans:
        return path
    for n in range(len(path) - 1, 0, -1):
        prefix = path[:n]
        if prefix in loc.spans:
            value: Any = loc.value
            try:
                for p in prefix:
                    value = value[p]
            except (KeyError, IndexError, TypeError):
                return path
            return prefix if value == text else path
    return path


def _inline(loc: Located, path: tuple, text: str) -> TemplateSource:
    path = _source_path(loc, path, text)
    span = loc.span(path) or Span(loc.file, 1, 1)  # an included value's span names its own file
    if path in loc.block_paths:
        return TemplateSource(
            text,
            span.file,
            span.line + 1,
            _block_indent(span.file, span.line, len(text.splitlines())) + 1,
            inline=True,
            block=True,
        )
    quoted = 1 if loc.spans.get(path) and _is_quoted(loc, path) else 0
    flat = "\n" in text and span.end_col is not None  # the scalar ends on the line it starts on
    return TemplateSource(text, span.file, span.line, span.col + quoted, inline=True, flat=flat)


def _block_indent(file: str, indicator_line: int, n_lines: int) -> int:
    """Indentation of a block scalar: the least of its non-blank lines after the | or > line
    (the first line decides, unless an explicit indentation indicator lets it be deeper)."""
    cache = SourceCache()
    indents = []
    for line in range(indicator_line + 1, indicator_line + 1 + max(n_lines, 1)):
        text = cache.line(file, line)
        if text is None:
            break
        if text.strip():
            indents.append(len(text) - len(text.lstrip(" ")))
    return min(indents, default=0)


def _is_quoted(loc: Located, path: tuple) -> bool:
    from .diagnostics import SourceCache  # local: rendering helper reused for one char lookup

    span = loc.spans[path]
    line = SourceCache().line(span.file, span.line) or ""
    return line[span.col - 1 : span.col] in ("'", '"')


def _read_template_files(
    spec: GraphSpec, nodes: dict[str, Node], file: str, loc: Located, diags: list[Diagnostic]
) -> dict[tuple, TemplateSource]:
    base = Path(file).parent / (spec.templates or "")
    root = base.resolve()
    out: dict[tuple, TemplateSource] = {}
    for path, msg in _messages(spec, nodes):
        content = msg.content
        if TEMPLATE_FILE.match(content):
            tfile = base / content
            try:
                text = read_template(tfile, root, outside_ok=spec.templates_outside)
                out[path] = TemplateSource(text, str(tfile), 1, 1, inline=False)
            except TemplateRefused as exc:
                diags.append(Diagnostic("E007", str(exc), loc.span(path), exc.hint))
            except (OSError, UnicodeDecodeError) as exc:
                near = [p.name for p in tfile.parent.glob("*.j2")] if tfile.parent.is_dir() else []
                what = (
                    f"template file not found: {tfile}"
                    if isinstance(exc, FileNotFoundError)
                    else f"cannot read template file {tfile}: {getattr(exc, 'strerror', None) or exc}"
                )
                where = (
                    f"template paths are relative to {base}"
                    if base.is_dir()
                    else f"template paths are relative to {base}; {base} does not exist (templates: "
                    f"{spec.templates!r} is relative to the graph file)"
                )
                diags.append(Diagnostic("E007", what, loc.span(path), did_you_mean(tfile.name, near) or where))
    for name, decl in spec.models.items():
        if decl.chat_template is not None:
            path = ("models", name, "chat_template")
            src = _read_chat_template(decl.chat_template, Path(file).parent, root, spec, loc.span(path), diags)
            if src is not None:
                out[path] = src
    return out


def _read_chat_template(
    name: str, graph_dir: Path, root: Path, spec: GraphSpec, span: Span | None, diags: list[Diagnostic]
) -> TemplateSource | None:
    """A model's chat-template file: relative to the graph file, confined like prompt files (inside
    the templates folder unless templates_outside: true), a regular text file of at most 1 MiB."""
    tfile = graph_dir / name
    try:
        text = read_template(tfile, root, outside_ok=spec.templates_outside)
        return TemplateSource(text, str(tfile), 1, 1, inline=False)
    except TemplateRefused as exc:
        diags.append(Diagnostic("E007", f"chat_template: {exc}", span, exc.hint))
    except (OSError, UnicodeDecodeError) as exc:
        near = (
            [p.name for p in tfile.parent.iterdir() if p.suffix in (".jinja", ".j2", ".jinja2")]
            if tfile.parent.is_dir()
            else []
        )
        what = (
            f"chat template file not found: {tfile}"
            if isinstance(exc, FileNotFoundError)
            else f"cannot read chat template file {tfile}: {getattr(exc, 'strerror', None) or exc}"
        )
        hint = did_you_mean(tfile.name, near) or f"chat_template: is relative to the graph file ({graph_dir})"
        diags.append(Diagnostic("E007", what, span, hint))
    return None


# ---------------------------------------------------------------- template and expression sites


def _sites(g: Graph) -> Iterator[Site]:
    loc = g.located

    def site(path: tuple, text: str, kind: str, node: str | None) -> Site:
        src = g.templates.get(path) or _inline(loc, path if path[-1] != "<key>" else path[:-1], text)
        return Site(path, kind, src, node)

    spec = g.spec
    for name, inp in spec.inputs.items():
        yield site(("inputs", name, "from"), inp.from_, "expression", None)
    for tid, th in spec.threads.items():
        for i, m in enumerate(th.prompt):
            yield site(("threads", tid, "prompt", i, m.role), m.content, "template", None)
        if th.tools:
            yield site(("threads", tid, "tools"), th.tools, "template", None)
        if th.summarize is not None:
            for i, m in enumerate(th.summarize.prompt):
                yield site(("threads", tid, "summarize", "prompt", i, m.role), m.content, "template", None)
            yield site(("threads", tid, "summarize", "content"), th.summarize.content, "template", None)
    for nid, n in g.nodes.items():
        base = ("nodes", nid)
        if n.foreach:
            yield site(base + ("foreach", "over"), n.foreach.over, "expression", nid)
        for path, text, kind in n.sites():
            yield site(base + path, text, kind, nid)
        for p, t in walk_strings(n.update, base + ("update",), keys_too=True):
            yield site(p, t, "template", nid)
        if n.append_to:
            yield site(base + ("append_to", "content"), n.append_to.content, "template", nid)
        for i, b in enumerate(getattr(n, "next", None) or ()):
            if b.when is not None:
                yield site(base + ("next", i, "when"), b.when, "expression", nid)
    if spec.environment:
        for p, t in walk_strings(spec.environment.args, ("environment", "args")):
            yield site(p, t, "template", None)
    if spec.reward:
        for path, _, args in spec.reward.items():
            for p, t in walk_strings(args, path):
                yield site(p, t, "template", None)
        if spec.reward.group:
            for p, t in walk_strings(spec.reward.group.args, ("reward", "group", "args")):
                yield site(p, t, "template", None)
