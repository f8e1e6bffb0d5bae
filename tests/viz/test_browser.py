"""The trajectory viewer in a real browser: Debian's headless Chromium opens the HTML from file://.

Driven with Playwright's Python package against /usr/bin/chromium (`make browser` installs it;
nothing is downloaded: `playwright install` is never run). Checks: no console errors, no network
request, the DOM's spans and trained/masked token counts equal the trajectory's for every sample,
the graph overlay's visit counts, hover text, the heatmap toggle; a 64 x 8k-token file stays
responsive. Screenshots are kept under artifacts/viz/ (git-ignored) as test artefacts.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from synth import write_synthetic
from vizkit import multiturn_graph, real_records, real_run, repo  # noqa: F401 (pytest fixtures)

from graphrl.viz.build import trajectory_output

CHROMIUM = Path(os.environ.get("GRAPHRL_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "viz"


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium (apt-get, as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing: pip install -e '.[dev]'")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=[f for f in FLAGS if f != "--headless"],
            viewport={"width": 1400, "height": 1000},
        )
        yield ctx
        ctx.close()


class Page:
    """A page that records console errors, page errors and every non-file request."""

    def __init__(self, ctx, url: str):
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page = ctx.new_page()
        self.page.on(
            "console",
            lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type in ("error", "warning") else None,
        )
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on(
            "request", lambda r: None if r.url.startswith(("file:", "data:", "about:")) else self.requests.append(r.url)
        )
        t0 = time.monotonic()
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        self.load_s = time.monotonic() - t0

    def count(self, selector: str) -> int:
        return self.page.eval_on_selector_all(selector, "els => els.length")

    def clean(self) -> None:
        assert self.errors == [] and self.requests == []


def test_viewer_shows_the_trajectory(browser_context, real_run, real_records, multiturn_graph, tmp_path):
    html = tmp_path / "multiturn.html"
    html.write_text(trajectory_output(real_run, "html", graph=str(multiturn_graph), tokenizer="qwen"))
    pg = Page(browser_context, html.as_uri())
    page = pg.page
    samples = {(r["group"], r["n"]): r for r in real_records if r.get("tokens")}
    for group in sorted({g for g, _ in samples}):
        page.select_option("#group", str(group))
        assert pg.count("#group-table tbody tr") == sum(1 for g, _ in samples if g == group)
        for row in range(pg.count("#group-table tbody tr")):
            page.click(f"#group-table tbody tr >> nth={row}")
            rec = samples[(group, row)]
            assert pg.count("#strip .span") == len(rec["spans"])
            assert pg.count("#strip .span[data-mask='1'] .tk") == sum(rec["loss_mask"])
            assert pg.count("#strip .span[data-mask='0'] .tk") == rec["response_length"] - sum(rec["loss_mask"])
            nodes = [
                page.eval_on_selector(f"#strip .span >> nth={i}", "e => e.dataset.node")
                for i in range(len(rec["spans"]))
            ]
            assert nodes == [sp["node"] for sp in rec["spans"]]
            visits = Counter(p[0] for p in rec["rollout"]["path"])
            for node, n in visits.items():
                assert page.text_content(f"#graph-box .g-visits[data-node='{node}']") == f"\u00d7{n}"
            assert pg.count("#graph-box .g-taken") >= 2
            assert pg.count("#waterfall tbody tr") == len(rec["rollout"]["calls"])
    # hover: id, text, node, visit, log-prob
    page.hover("#strip .span[data-mask='1'] .tk >> nth=2")
    tip = page.text_content("#tip")
    assert page.is_visible("#tip") and " id " in tip and "node turn #" in tip and "log-prob" in tip
    # the heatmap toggle recolours trained tokens
    before = page.eval_on_selector("#strip .span[data-mask='1'] .tk", "e => getComputedStyle(e).backgroundColor")
    page.check("#heat")
    after = page.eval_on_selector("#strip .span[data-mask='1'] .tk", "e => getComputedStyle(e).backgroundColor")
    assert before != after
    page.check("#show-prompt")
    assert pg.count("#strip .prompt .tk") == rec["prompt_length"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "trajectory.png"), full_page=True)
    pg.clean()


def test_graph_page_renders(browser_context, tmp_path, repo):
    from graphrl.viz.build import graph_output

    html = tmp_path / "agentflow.html"
    html.write_text(
        graph_output(repo / "graphs" / "agentflow.yaml", "html").replace(
            "</body>", '<script>document.body.setAttribute("data-ready","1")</script></body>'
        )
    )
    pg = Page(browser_context, html.as_uri())
    box = pg.page.eval_on_selector("svg", "s => { const b = s.getBBox(); return [b.width, b.height]; }")
    assert box[0] > 300 and box[1] > 500
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pg.page.screenshot(path=str(ARTIFACTS / "agentflow-graph.png"), full_page=True)
    pg.clean()


def test_large_run_stays_responsive(browser_context, tmp_path, multiturn_graph):
    path = tmp_path / "large.jsonl"
    recs = write_synthetic(path, 8, 8, 8192)
    html = tmp_path / "large.html"
    html.write_text(trajectory_output(path, "html", graph=str(multiturn_graph), tokenizer="none"))
    pg = Page(browser_context, html.as_uri())
    assert pg.load_s < 20
    timings = []
    for row in (3, 5):
        t0 = time.monotonic()
        pg.page.click(f"#group-table tbody tr >> nth={row}")
        assert pg.count("#strip .tk") == 8192
        timings.append(time.monotonic() - t0)
        rec = recs[row]
        assert pg.count("#strip .span[data-mask='1'] .tk") == sum(rec["loss_mask"])
    pg.page.select_option("#node-scope", "all")
    total_trained = sum(sum(r["loss_mask"]) for r in recs)
    cell = pg.page.text_content("#node-table tr[data-node='turn'] td:nth-child(6)")
    assert int(cell.replace(",", "")) == total_trained
    print(
        f"large run: load {pg.load_s:.2f} s, sample switch {max(timings):.2f} s, "
        f"{html.stat().st_size:,} bytes; {json.dumps({'timings': timings})}"
    )
    assert max(timings) < 10
    pg.page.screenshot(path=str(ARTIFACTS / "large.png"))
    pg.clean()
