"""Golden diagrams: every bundled graph draws to exactly tests/viz/golden/<graph>.{svg,dot,mmd,txt}.

After an intended change to the drawing, the layout or a bundled graph, regenerate with

    GRAPHRL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/viz/test_golden_diagrams.py

and look at the new SVGs (they open in any browser) before committing them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.viz.diagram import diagram_from_plan
from graphrl.viz.svg import render_svg
from graphrl.viz.textgraph import to_dot, to_mermaid, to_text

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
GRAPHS = sorted((REPO / "graphs").glob("*.yaml")) + [REPO / "graphs" / "examples" / "solvers.yaml"]
UPDATE = os.environ.get("GRAPHRL_UPDATE_GOLDEN") == "1"
RENDERERS = {"svg": render_svg, "dot": to_dot, "mmd": to_mermaid, "txt": to_text}


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)


def diagram(graph: Path):
    plan, diags = plan_from_path(graph.relative_to(REPO).as_posix())
    assert plan is not None, diags
    return diagram_from_plan(plan)


def test_all_bundled_graphs_are_covered():
    assert {g.stem for g in GRAPHS} >= {"hello", "agentflow", "memagent", "toolorchestra"}


@pytest.mark.parametrize("ext", sorted(RENDERERS))
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_golden(graph: Path, ext: str):
    text = RENDERERS[ext](diagram(graph))
    golden = GOLDEN / f"{graph.stem}.{ext}"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"no golden file {golden.name}: run with GRAPHRL_UPDATE_GOLDEN=1"
    assert text == golden.read_text(encoding="utf-8"), (
        f"{graph.name} draws differently from {golden.relative_to(REPO)}; if intended, regenerate with "
        "GRAPHRL_UPDATE_GOLDEN=1 and review the new file"
    )


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_svg_is_deterministic_and_well_formed(graph: Path):
    import xml.etree.ElementTree as ET

    d = diagram(graph)
    a, b = render_svg(d), render_svg(diagram(graph))
    assert a == b
    root = ET.fromstring(a)
    ns = "{http://www.w3.org/2000/svg}"
    nodes = {g.get("data-node") for g in root.iter(f"{ns}g") if "g-node" in (g.get("class") or "")}
    edges = [(g.get("data-src"), g.get("data-dst")) for g in root.iter(f"{ns}g") if "g-edge" in (g.get("class") or "")]
    assert nodes == {n.id for n in d.nodes}
    assert edges == [(e.src, e.dst) for e in d.edges]
    assert not re.search(r"\b(nan|inf)\b", a)


def test_svg_shows_kinds_roles_endpoints_conditions_and_loops():
    svg = render_svg(diagram(REPO / "graphs" / "agentflow.yaml"))
    assert 'class="g-node g-role-trained g-kind-llm" data-node="next_step"' in svg
    assert 'class="g-node g-role-frozen g-kind-llm" data-node="verifier"' in svg
    assert 'class="g-node g-role-none g-kind-switch" data-node="run_tool"' in svg
    assert "llm · instruct" in svg and "llm · coder" in svg  # endpoints
    assert "python_coder.ok" in svg  # a `when` condition
    assert 'g-edge g-style-default g-loop" data-src="verifier" data-dst="next_step"' in svg  # the loop, a default
    assert 'g-style-limit" data-src="next_step" data-dst="final_output"' in svg  # on_limit
    assert 'g-style-default" data-src="run_tool" data-dst="tool_error"' in svg  # router default


def test_masked_role_for_nodes_appending_to_a_thread():
    d = diagram(REPO / "graphs" / "toolorchestra.yaml")
    roles = {n.id: n.role for n in d.nodes}
    assert roles["orchestrate"] == "trained"
    assert roles["search"] == "masked" and roles["run_code"] == "masked"
    assert roles["dispatch"] == "none"
    assert roles["search_query"] == "frozen"


def test_mermaid_ids_never_clash_with_keywords():
    mmd = to_mermaid(diagram(REPO / "graphs" / "hello.yaml"))
    assert "n_end" in mmd and not re.search(r"^\s*end\b", mmd, re.M)
