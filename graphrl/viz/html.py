"""Payload + SVG + viewer assets -> one self-contained HTML file (opens offline, from disk).

Input: the viewer payload (`payload.build_payload`) and the graph's SVG (or None), or just an SVG
for a graph page. Output: HTML text.

Invariants: everything is inline (CSS, JS, SVG, data as `<script type="application/json">`); no URL
is ever loaded (no CDN, no fetch, no fonts); the JSON is escaped so that no `<` can close the script
element; deterministic for the same inputs.
"""

from __future__ import annotations

import json
import math
from html import escape
from importlib import resources
from typing import Any


def _asset(name: str) -> str:
    return resources.files("graphrl.viz").joinpath("assets", name).read_text(encoding="utf-8")


def finite(v: Any) -> Any:
    """JSON has no NaN/Infinity: they become null (a NaN reward or latency must not break the page)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def _json_for_script(data: Any) -> str:
    text = json.dumps(finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="graphrl visualize">
<title>{title}</title>
<style>{css}</style>
</head><body>
<header><h1 id="title">{title}</h1><div class="sub" id="sub"></div><div id="notices"></div></header>
<nav><label for="group">prompt group</label><select id="group"></select>
<span class="muted">click a row of the group table to pick a sample</span></nav>
<main>
<div class="cols">
<section id="graph"><h2>Graph <small>path taken, visits per node</small>
<select id="graph-scope"><option value="rollout">this rollout</option><option value="group">whole group</option></select></h2>
<div id="graph-box">{svg}</div>
<div class="legend muted"><span><i class="chip" style="background:#ffe8cc;border:1px solid #e8590c"></i>trained policy</span>
<span><i class="chip" style="background:#e7f5ff;border:1px solid #1c7ed6"></i>in a sample, masked</span>
<span><i class="chip" style="background:#f1f3f5;border:1px solid #495057"></i>frozen model</span>
<span><i class="chip" style="border:1px solid #868e96"></i>no training sequence</span>
<span><b style="color:#2b8a3e">green</b>: taken, ×N visits</span></div></section>
<div>
<section><h2>Group <small>the samples of one prompt</small></h2>
<div class="tbl"><table id="group-table"><thead><tr><th class="num">n</th><th class="num">rollout</th>
<th class="num">reward</th><th>status</th><th class="num">samples</th><th class="num">tokens</th>
<th class="num">trained</th><th>path taken</th><th>final answer</th></tr></thead><tbody></tbody></table></div></section>
<section><h2>Waterfall <small id="rollout-name"></small></h2><div class="muted" id="waterfall-sum"></div>
<div class="tbl"><table id="waterfall"><thead><tr><th class="num">#</th><th>node</th><th>endpoint</th><th>time</th>
<th class="num">latency</th><th class="num">in</th><th class="num">out</th><th class="num">cached</th><th>finish</th>
<th>cost / error</th></tr></thead><tbody></tbody></table></div></section>
</div></div>
<section id="tokens"><h2>Token strip <small>the training sample's response, coloured by node</small></h2>
<div class="tabs" id="sample-tabs"></div>
<div class="controls"><label><input type="checkbox" id="heat"> log-prob heatmap</label>
<label><input type="checkbox" id="show-prompt"> show prompt</label>
<span><span class="tk c0 m1">trained</span> solid, underlined: loss mask 1 &nbsp;
<span class="tk c0 m0">masked</span> hatched, grey: loss mask 0</span></div>
<div class="legend" id="legend"></div>
<div class="muted" id="strip-summary"></div>
<div id="strip"></div></section>
<section><h2>Per node <small>tokens generated vs trained, calls, time</small>
<select id="node-scope"><option value="group">this group</option><option value="all">all groups</option></select></h2>
<div class="tbl"><table id="node-table"><thead><tr><th>node</th><th>role</th><th class="num">visits</th>
<th class="num">calls</th><th class="num">generated</th><th class="num">trained</th><th class="num">masked</th>
<th class="num">prompt in</th><th class="num">cached</th><th class="num">time</th><th class="num">errors</th></tr></thead>
<tbody></tbody></table></div></section>
</main>
<div id="tip"></div>
<script type="application/json" id="graphrl-data">{data}</script>
<script>{js}</script>
</body></html>
"""


def trajectory_html(payload: dict[str, Any], svg: str | None) -> str:
    title = f"graphrl trajectory · {payload['meta'].get('graph') or 'unknown graph'}"
    body_svg = svg if svg else '<p class="muted" style="padding:8px">no graph to draw: no node path recorded</p>'
    return PAGE.format(
        title=escape(title),
        css=_asset("viewer.css"),
        svg=body_svg,
        data=_json_for_script(payload),
        js=_asset("viewer.js"),
    )


GRAPH_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="graphrl visualize">
<title>{title}</title>
<style>body{{margin:16px;font:13px system-ui,sans-serif;color:#212529}} .box{{overflow:auto}}</style>
</head><body><div class="box">{svg}</div></body></html>
"""


def graph_html(name: str, svg: str) -> str:
    return GRAPH_PAGE.format(title=escape(f"graphrl graph · {name}"), svg=svg)
