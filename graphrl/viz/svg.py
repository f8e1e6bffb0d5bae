"""Diagram -> SVG text, laid out by `layout.layered_layout` (no external tools).

Input: a `Diagram`. Output: one standalone SVG document (a string), also embedded inline by the
trajectory viewer, which finds nodes by `data-node`, edges by `data-src`/`data-dst` and fills the
empty `g-visits` badges.

Drawing: llm nodes are rounded boxes, tools square boxes with a side bar, switches hexagons, updates
dashed boxes; the fill is the training role (legend at the bottom); edges carry their condition,
router defaults are dashed, on_error red, on_limit orange and dotted, loops (back edges) purple and
routed up the right-hand side.

Invariants: deterministic (same Diagram -> same bytes): no timestamps, no random ids, fixed number
formatting; text widths are estimated for a monospace font, so no font files are read.
"""

from __future__ import annotations

import unicodedata
from xml.sax.saxutils import escape, quoteattr

from .diagram import EDGE_TEXT, ROLE_TEXT, Diagram, DNode
from .layout import Layout, layered_layout

FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
TITLE_PX, LINE_PX, LABEL_PX = 13, 11, 11
PAD_X, PAD_Y = 12, 8
HEADER = 40
ROLE_COLOURS = {  # fill, stroke
    "trained": ("#ffe8cc", "#e8590c"),
    "masked": ("#e7f5ff", "#1c7ed6"),
    "frozen": ("#f1f3f5", "#495057"),
    "none": ("#ffffff", "#868e96"),
}
EDGE_COLOURS = {
    "next": "#495057",
    "cond": "#495057",
    "default": "#495057",
    "start": "#495057",
    "error": "#c92a2a",
    "limit": "#e67700",
    "loop": "#7048e8",
    "taken": "#2b8a3e",
}
DASH = {"default": "6 4", "error": "4 3", "limit": "2 3"}

STYLE = """
.g-node text{fill:#212529}
.g-node .g-id{font-weight:700;font-size:13px}
.g-node .g-line{font-size:11px;fill:#495057}
.g-edge path{fill:none;stroke-width:1.4}
.g-edge text{font-size:11px;paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
.g-visits{font-size:11px;font-weight:700;fill:#2b8a3e}
.g-legend text{font-size:11px;fill:#495057}
"""


def text_width(text: str, px: float) -> float:
    """Estimated advance of `text` in a monospace font of size px (east-Asian wide characters count 2)."""
    cells = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
    return cells * px * 0.6


def fmt(v: float) -> str:
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def node_size(n: DNode) -> tuple[float, float]:
    if n.kind == "start":
        return (14.0, 14.0)
    if n.kind in ("end", "abort"):
        return (text_width(n.id, LINE_PX) + 24, 24.0)
    w = max([text_width(n.id, TITLE_PX)] + [text_width(t, LINE_PX) for t in n.lines]) + 2 * PAD_X
    return (round(max(w, 80.0)), float(2 * PAD_Y + 16 + 14 * len(n.lines)))


def diagram_layout(d: Diagram) -> Layout:
    ids = [n.id for n in d.nodes]
    sizes = {n.id: node_size(n) for n in d.nodes}
    labels = [((text_width(e.text, LABEL_PX), 14.0) if e.text else (0.0, 0.0)) for e in d.edges]
    return layered_layout(ids, sizes, [(e.src, e.dst) for e in d.edges], labels, roots=[ids[0]])


def _shape(n: DNode, x0: float, y0: float, w: float, h: float, fill: str, stroke: str) -> str:
    a = f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"'
    if n.form == "hexagon":
        k = min(12.0, h / 2)
        pts = [
            (x0 + k, y0),
            (x0 + w - k, y0),
            (x0 + w, y0 + h / 2),
            (x0 + w - k, y0 + h),
            (x0 + k, y0 + h),
            (x0, y0 + h / 2),
        ]
        return f'<polygon points="{" ".join(f"{fmt(px)},{fmt(py)}" for px, py in pts)}" {a}/>'
    rx = {"rounded": 10, "tool": 2, "dashed": 2}.get(n.form, 10)
    dash = ' stroke-dasharray="5 3"' if n.form == "dashed" else ""
    out = f'<rect x="{fmt(x0)}" y="{fmt(y0)}" width="{fmt(w)}" height="{fmt(h)}" rx="{rx}" {a}{dash}/>'
    if n.form == "tool":
        out += (
            f'<line x1="{fmt(x0 + 5)}" y1="{fmt(y0)}" x2="{fmt(x0 + 5)}" y2="{fmt(y0 + h)}" '
            f'stroke="{stroke}" stroke-width="1.5"/>'
        )
    return out


def _node(n: DNode, box, dy: float) -> str:
    x0, y0 = box.x - box.w / 2, box.y - box.h / 2 + dy
    attrs = f'class="g-node g-role-{n.role} g-kind-{n.kind}" data-node={quoteattr(n.id)}'
    title = f"<title>{escape(n.title or n.id)}</title>"
    badge = f'<text class="g-visits" data-node={quoteattr(n.id)} x="{fmt(x0 + box.w + 3)}" y="{fmt(y0 + 2)}"></text>'
    if n.kind == "start":
        return f'<g {attrs}>{title}<circle cx="{fmt(box.x)}" cy="{fmt(box.y + dy)}" r="7" fill="#343a40"/>{badge}</g>'
    if n.kind in ("end", "abort"):
        fill = "#343a40" if n.kind == "end" else "#c92a2a"
        return (
            f'<g {attrs}>{title}<rect x="{fmt(x0)}" y="{fmt(y0)}" width="{fmt(box.w)}" height="{fmt(box.h)}" '
            f'rx="12" fill="{fill}"/><text x="{fmt(box.x)}" y="{fmt(box.y + dy + 4)}" text-anchor="middle" '
            f'font-size="11" style="fill:#fff">{escape(n.id)}</text>{badge}</g>'
        )
    fill, stroke = ROLE_COLOURS.get(n.role, ROLE_COLOURS["none"])
    parts = [
        f"<g {attrs}>",
        title,
        _shape(n, x0, y0, box.w, box.h, fill, stroke),
        f'<text class="g-id" x="{fmt(x0 + PAD_X)}" y="{fmt(y0 + PAD_Y + 12)}">{escape(n.id)}</text>',
    ]
    for i, line in enumerate(n.lines):
        parts.append(
            f'<text class="g-line" x="{fmt(x0 + PAD_X)}" y="{fmt(y0 + PAD_Y + 28 + 14 * i)}">{escape(line)}</text>'
        )
    parts.append(badge + "</g>")
    return "".join(parts)


def _curve(points) -> str:
    """A smooth path through the points, vertical at each of them (ranks are horizontal bands)."""
    p = list(points)
    d = f"M{fmt(p[0][0])},{fmt(p[0][1])}"
    for (x1, y1), (x2, y2) in zip(p, p[1:]):
        ym = (y1 + y2) / 2
        d += f" C{fmt(x1)},{fmt(ym)} {fmt(x2)},{fmt(ym)} {fmt(x2)},{fmt(y2)}"
    return d


def _self_loop(points) -> str:
    (x0, y0), (mx, my), (x1, y1) = points
    return f"M{fmt(x0)},{fmt(y0)} C{fmt(mx)},{fmt(y0 - 10)} {fmt(mx)},{fmt(y1 + 10)} {fmt(x1)},{fmt(y1)}"


def _edge(e, route, dy: float) -> str:
    loop = route.back or route.self_loop
    colour_key = e.style if e.style in ("error", "limit") else ("loop" if loop else e.style)
    colour = EDGE_COLOURS[colour_key]
    pts = [(px, py + dy) for px, py in route.points]
    d = _self_loop(pts) if route.self_loop else _curve(pts)
    dash = f' stroke-dasharray="{DASH[e.style]}"' if e.style in DASH else ""
    cls = f"g-edge g-style-{e.style}" + (" g-loop" if loop else "")
    out = [f'<g class="{cls}" data-src={quoteattr(e.src)} data-dst={quoteattr(e.dst)}>']
    if e.title:
        out.append(f"<title>{escape(e.title)}</title>")
    out.append(f'<path d="{d}" stroke="{colour}"{dash} marker-end="url(#g-arrow-{colour_key})"/>')
    if e.text and route.label_at:
        lx, ly = route.label_at
        out.append(f'<text x="{fmt(lx)}" y="{fmt(ly + dy)}" style="fill:{colour}">{escape(e.text)}</text>')
    out.append("</g>")
    return "".join(out)


def _markers() -> str:
    return "".join(
        f'<marker id="g-arrow-{k}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>'
        for k, c in EDGE_COLOURS.items()
    )


def _legend(y: float) -> tuple[str, float, float]:
    parts, x = ['<g class="g-legend">'], 16.0
    for role, text in ROLE_TEXT.items():
        fill, stroke = ROLE_COLOURS[role]
        parts.append(
            f'<rect x="{fmt(x)}" y="{fmt(y)}" width="14" height="12" rx="3" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{fmt(x + 20)}" y="{fmt(y + 10)}">{escape(text)}</text>'
        )
        x += 20 + text_width(text, LABEL_PX) + 18
    width = x
    x, y2 = 16.0, y + 20
    for style, text in [
        ("cond", EDGE_TEXT["cond"]),
        ("default", EDGE_TEXT["default"]),
        ("error", "on_error"),
        ("limit", "on_limit"),
        ("loop", "loop (back edge)"),
    ]:
        colour = EDGE_COLOURS["loop" if style == "loop" else style]
        dash = f' stroke-dasharray="{DASH[style]}"' if style in DASH else ""
        parts.append(
            f'<line x1="{fmt(x)}" y1="{fmt(y2 + 6)}" x2="{fmt(x + 22)}" y2="{fmt(y2 + 6)}" '
            f'stroke="{colour}" stroke-width="1.5"{dash}/><text x="{fmt(x + 28)}" y="{fmt(y2 + 10)}">'
            f"{escape(text)}</text>"
        )
        x += 28 + text_width(text, LABEL_PX) + 18
    parts.append("</g>")
    return "".join(parts), max(width, x), 40.0


def render_svg(d: Diagram, legend: bool = True) -> str:
    lay = diagram_layout(d)
    dy = HEADER
    body = [_edge(e, r, dy) for e, r in zip(d.edges, lay.routes)]
    body += [_node(n, lay.boxes[n.id], dy) for n in d.nodes]
    leg, leg_w, leg_h = _legend(dy + lay.height + 4) if legend else ("", 0.0, 0.0)
    sub = d.note or d.description or ""
    width = max(lay.width, leg_w, text_width(d.name, 15) + 32, text_width(sub, 11) + 32)
    height = dy + lay.height + (leg_h + 8 if legend else 0)
    head = (
        f'<text x="16" y="20" font-size="15" font-weight="700" style="fill:#212529">{escape(d.name)}</text>'
        f'<text x="16" y="34" font-size="11" style="fill:#868e96">{escape(sub)}</text>'
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="g-diagram" width="{fmt(width)}" height="{fmt(height)}" '
        f'viewBox="0 0 {fmt(width)} {fmt(height)}" font-family="{FONT}" role="img">\n'
        f"<title>{escape(d.name)}</title>\n<style>{STYLE}</style>\n<defs>{_markers()}</defs>\n"
        f'<rect width="100%" height="100%" fill="#fff"/>\n{head}\n'
        + "\n".join(body)
        + ("\n" + leg if leg else "")
        + "\n</svg>\n"
    )
