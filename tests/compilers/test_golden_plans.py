"""Golden plan files: every bundled graph compiles to exactly tests/golden/<graph>.plan.json.

Plans name files relative to the working directory, so compiling happens from the repository root.
After an intended change to the language, the lowering or a bundled graph, regenerate with

    GRAPHRL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compilers/test_golden_plans.py

and review the diff of tests/golden/ like any other change.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from graphrl.compilers.checks import check_file
from graphrl.compilers.lower import lower
from graphrl.plan import PLAN_FORMAT, load_plan, plan_json
from graphrl.spec.diagnostics import has_errors

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden"
GRAPHS = sorted((REPO / "graphs").glob("*.yaml")) + [REPO / "graphs" / "examples" / "solvers.yaml"]
UPDATE = os.environ.get("GRAPHRL_UPDATE_GOLDEN") == "1"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)


def compile_text(graph: Path) -> str:
    rel = graph.relative_to(REPO).as_posix()
    g, diags = check_file(rel)
    assert g is not None and not has_errors(diags), "\n".join(d.render() for d in diags)
    return plan_json(lower(g))


def test_there_are_bundled_graphs():
    assert {g.stem for g in GRAPHS} >= {"hello"}


@pytest.mark.parametrize("graph", GRAPHS, ids=[g.stem for g in GRAPHS])
def test_plan_matches_golden_file(graph: Path):
    text = compile_text(graph)
    golden = GOLDEN / f"{graph.stem}.plan.json"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        golden.write_bytes(text.encode("utf-8"))
    assert golden.exists(), f"no golden file for {graph.name}: run with GRAPHRL_UPDATE_GOLDEN=1"
    assert golden.read_bytes() == text.encode("utf-8"), (
        f"{golden.relative_to(REPO)} is out of date; if the change is intended, regenerate it with "
        "GRAPHRL_UPDATE_GOLDEN=1 and review the diff"
    )


def test_every_golden_file_has_a_graph():
    stems = {g.stem for g in GRAPHS}
    stale = [p.name for p in GOLDEN.glob("*.plan.json") if p.name.removesuffix(".plan.json") not in stems]
    assert stale == []


@pytest.mark.parametrize("graph", GRAPHS, ids=[g.stem for g in GRAPHS])
def test_compiling_twice_gives_identical_bytes(graph: Path):
    assert compile_text(graph) == compile_text(graph)


@pytest.mark.parametrize("graph", GRAPHS, ids=[g.stem for g in GRAPHS])
def test_plan_loads_back_and_reserialises_identically(graph: Path, tmp_path: Path):
    text = compile_text(graph)
    f = tmp_path / "plan.json"
    f.write_text(text, encoding="utf-8")
    plan = load_plan(f)
    assert plan.format == PLAN_FORMAT
    assert plan_json(plan) == text


@pytest.mark.parametrize("graph", GRAPHS, ids=[g.stem for g in GRAPHS])
def test_plan_is_self_contained(graph: Path):
    """Template files are inlined, each listed with the sha256 of its text; no .j2 names remain."""
    rel = graph.relative_to(REPO).as_posix()
    g, _ = check_file(rel)
    plan = lower(g)
    data = json.loads(plan_json(plan))
    own = hashlib.sha256(graph.read_bytes()).hexdigest()
    if plan.subgraphs or g.includes or g.templates:  # the hash also covers sub-graph, included and template files
        assert data["source"]["file"] == rel and data["source"]["sha256"] != own
    else:
        assert data["source"] == {"file": rel, "sha256": own}
    file_templates = {src.file: src for src in g.templates.values()}
    assert sorted(plan.templates) == sorted(Path(os.path.relpath(f)).as_posix() for f in file_templates)
    for name, entry in plan.templates.items():
        raw = (REPO / name).read_bytes()
        assert entry.sha256 == hashlib.sha256(raw).hexdigest(), name
        assert entry.lines == len(raw.decode("utf-8").splitlines()), name
    # every message that named a file now holds that file's text
    for path, src in g.templates.items():
        node = data
        for part in path:
            node = node[part]
        assert node == Path(src.file).read_text(encoding="utf-8")
    for messages in _all_messages(data):
        for content in messages:
            assert not (isinstance(content, str) and content.endswith(".j2")), content


def _all_messages(data: dict):
    for th in data["threads"].values():
        yield [v for m in th["prompt"] for v in m.values()]
    for n in data["nodes"].values():
        yield [v for m in n.get("prompt") or () for v in m.values()]


@pytest.mark.parametrize("graph", GRAPHS, ids=[g.stem for g in GRAPHS])
def test_plan_resolves_defaults(graph: Path):
    """Every llm node states train/sample/max_tokens; every non-switch node states where it goes next."""
    plan = load_plan_text(compile_text(graph))
    for nid, n in plan["nodes"].items():
        if n["kind"] == "llm":
            assert {"train", "sample", "max_tokens"} <= set(n), nid
        if n["kind"] != "switch":
            assert n["next"], nid
        if n.get("max_visits") or n.get("token_budget"):
            assert n["on_limit"], nid
    assert plan["start"] in plan["nodes"]
    assert "policy" in plan["models"]
    for value in plan["spans"].values():
        file, line, col = value.rsplit(":", 2)
        assert not Path(file).is_absolute() and int(line) >= 1 and int(col) >= 1


def load_plan_text(text: str) -> dict:
    return json.loads(text)


def test_inline_template_plan_from_another_directory(tmp_path: Path, monkeypatch):
    """A graph with a template file compiles the same from any cwd except for the relative names."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.j2").write_text("You are terse.\n")
    (tmp_path / "g.yaml").write_text(
        "name: g\ninputs: {q: prompt}\nnodes:\n  a:\n    llm: policy\n"
        "    prompt: [system: prompts/sys.j2, user: '{{ q }}']\n"
    )
    monkeypatch.chdir(tmp_path)
    g, diags = check_file("g.yaml")
    assert diags == []
    plan = lower(g)
    assert plan.templates["prompts/sys.j2"].sha256 == hashlib.sha256(b"You are terse.\n").hexdigest()
    assert plan.templates["prompts/sys.j2"].lines == 1
    assert plan.nodes["a"].prompt[0].system == "You are terse.\n"
    assert plan.spans["nodes.a.prompt.0.system"] == "prompts/sys.j2:1:1"


def test_an_edited_template_file_is_a_new_plan(tmp_path):
    """`graphrl run` resumes an `--out` only for the same plan (`plan_sha256`): a prompt file edited
    between two runs must change it, as an edited graph, include or sub-graph file does."""
    (tmp_path / "prompts").mkdir()
    ask = tmp_path / "prompts" / "ask.j2"
    ask.write_text("Answer: {{ question }}\n", encoding="utf-8")
    graph = tmp_path / "g.yaml"
    graph.write_text(
        "name: g\ninputs:\n  question: prompt\nnodes:\n  a:\n    llm: policy\n    prompt:\n      - user: prompts/ask.j2\n",
        encoding="utf-8",
    )

    def sha() -> str:
        g, diags = check_file(graph)
        assert g is not None and not [d for d in diags if d.severity == "error"], diags
        return lower(g).source["sha256"]

    before = sha()
    assert sha() == before  # the same files: the same plan
    ask.write_text("Answer briefly: {{ question }}\n", encoding="utf-8")
    assert sha() != before
