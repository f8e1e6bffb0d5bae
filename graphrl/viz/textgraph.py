"""Diagram -> Graphviz DOT, Mermaid flowchart, or plain text; optionally DOT -> SVG with Graphviz.

Input: a `Diagram`. Output: text in the target language, carrying the same information as the SVG
(kind by shape, role by colour, model endpoints, edge conditions and styles, loops are plain edges
that Graphviz and Mermaid route themselves).

Invariants: pure and deterministic (diagram order, fixed formatting); every identifier and label is
quoted/escaped for its language (Mermaid ids are prefixed, so `end` never clashes with a keyword).
`graphviz_svg` is the one function with I/O: it runs `dot -Tsvg` and fails with `GraphvizMissing`
when Graphviz is not installed (it is an option, never a requirement).
"""

from __future__ import annotations

import shutil
import subprocess

from .diagram import ROLE_TEXT, Diagram
from .svg import DASH, EDGE_COLOURS, FONT, ROLE_COLOURS


class GraphvizMissing(RuntimeError):
    """`dot` is not on PATH."""


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _dq(text: str) -> str:
    return '"' + _esc(text) + '"'


DOT_SHAPES = {
    "rounded": ("box", "rounded,filled"),
    "tool": ("component", "filled"),
    "hexagon": ("hexagon", "filled"),
    "dashed": ("box", "dashed,filled"),
    "start": ("point", "filled"),
    "end": ("box", "rounded,filled"),
    "abort": ("box", "rounded,filled"),
}


def to_dot(d: Diagram) -> str:
    lines = [
        f"// graphrl visualize: {d.name}",
        f"digraph {_dq(d.name)} {{",
        f"  graph [rankdir=TB, labelloc=t, fontname={_dq(FONT)}, label={_dq(d.name)}];",
        f'  node [fontname={_dq(FONT)}, fontsize=11, margin="0.15,0.06"];',
        f"  edge [fontname={_dq(FONT)}, fontsize=10];",
    ]
    for n in d.nodes:
        shape, style = DOT_SHAPES[n.form]
        if n.kind == "start":
            lines.append(f'  {_dq(n.id)} [shape=point, width=0.15, color="#343a40", tooltip="start"];')
            continue
        if n.kind in ("end", "abort"):
            fill = "#343a40" if n.kind == "end" else "#c92a2a"
            lines.append(
                f'  {_dq(n.id)} [shape={shape}, style="{style}", fillcolor="{fill}", color="{fill}", '
                f'fontcolor="#ffffff", label={_dq(n.id)}];'
            )
            continue
        fill, stroke = ROLE_COLOURS.get(n.role, ROLE_COLOURS["none"])
        label = "".join(_esc(x) + "\\l" for x in (n.id, *n.lines))  # \l: left-justified lines
        lines.append(
            f'  {_dq(n.id)} [shape={shape}, style="{style}", fillcolor="{fill}", color="{stroke}", '
            f'label="{label}", tooltip={_dq(ROLE_TEXT.get(n.role, n.role))}, '
            f'class="role-{n.role} kind-{n.kind}"];'
        )
    for e in d.edges:
        colour = EDGE_COLOURS.get(e.style, EDGE_COLOURS["next"])
        attrs = [f'color="{colour}"']
        if e.text:
            attrs += [f"label={_dq(e.text)}", f'fontcolor="{colour}"']
        if e.title and e.title != e.text:
            attrs.append(f"tooltip={_dq(e.title)}")
        if e.style in DASH:
            attrs.append("style=" + ("dotted" if e.style == "limit" else "dashed"))
        lines.append(f"  {_dq(e.src)} -> {_dq(e.dst)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mid(nid: str) -> str:
    return "n_" + "".join(c if c.isalnum() or c == "_" else f"_{ord(c):x}_" for c in nid)


def _mq(text: str) -> str:
    """Mermaid quoted label text: entity codes for characters that end or break a label."""
    for a, b in (
        ("&", "#amp;"),
        ('"', "#quot;"),
        ("<", "#lt;"),
        (">", "#gt;"),
        ("|", "#124;"),
        ("{", "#123;"),
        ("}", "#125;"),
    ):
        text = text.replace(a, b)
    return text


MERMAID_SHAPES = {
    "rounded": ('("', '")'),
    "tool": ('[["', '"]]'),
    "hexagon": ('{{"', '"}}'),
    "dashed": ('["', '"]'),
    "start": ('(("', '"))'),
    "end": ('(["', '"])'),
    "abort": ('(["', '"])'),
}


def to_mermaid(d: Diagram) -> str:
    lines = ["---", f"title: {d.name}", "---", "flowchart TD"]
    for n in d.nodes:
        a, b = MERMAID_SHAPES[n.form]
        text = "start" if n.kind == "start" else "<br/>".join([f"<b>{_mq(n.id)}</b>"] + [_mq(x) for x in n.lines])
        lines.append(f"  {_mid(n.id)}{a}{text}{b}")
    for e in d.edges:
        arrow = "-.->" if e.style in DASH else "-->"
        label = f'|"{_mq(e.text)}"|' if e.text else ""
        lines.append(f"  {_mid(e.src)} {arrow}{label} {_mid(e.dst)}")
    for role, (fill, stroke) in ROLE_COLOURS.items():
        lines.append(f"  classDef {role} fill:{fill},stroke:{stroke},color:#212529")
    lines.append("  classDef terminal fill:#343a40,stroke:#343a40,color:#ffffff")
    lines.append("  classDef abort fill:#c92a2a,stroke:#c92a2a,color:#ffffff")
    for cls in (*ROLE_COLOURS, "terminal", "abort"):
        ids = [_mid(n.id) for n in d.nodes if (n.role if n.kind != "abort" else "abort") == cls]
        if ids:
            lines.append(f"  class {','.join(ids)} {cls}")
    styled = [(i, e) for i, e in enumerate(d.edges) if e.style in ("error", "limit")]
    for i, e in styled:
        lines.append(f"  linkStyle {i} stroke:{EDGE_COLOURS[e.style]},color:{EDGE_COLOURS[e.style]}")
    return "\n".join(lines) + "\n"


def to_text(d: Diagram) -> str:
    """A plain listing: one line per node (kind, role, details), its edges indented under it."""
    out = [f"{d.name}: {d.description or ''}".rstrip(": ")]
    if d.note:
        out.append(f"({d.note})")
    out.append(f"start -> {d.start}")
    for n in d.nodes:
        if n.kind in ("start", "end", "abort"):
            continue
        out.append(f"{n.id}  [{n.kind}, {ROLE_TEXT.get(n.role, n.role)}]  " + "; ".join(n.lines))
        for e in d.edges:
            if e.src == n.id:
                # every way this edge is taken, each named (`next`, `when <expr>`, `case <v>`, `default`,
                # `on_limit`, `on_error`): one line may stand for several edges to the same node
                how = "" if e.labels == ("next",) else "  (" + " | ".join(e.labels) + ")"
                out.append(f"    -> {e.dst}{how}")
    return "\n".join(out) + "\n"


def graphviz_svg(dot_text: str, timeout: float = 30.0) -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizMissing("Graphviz `dot` is not installed")
    res = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"dot -Tsvg failed: {res.stderr.strip()[:500]}")
    return res.stdout
