"""`graphrl visualize` end to end (click runner): every format, and bad input -> located errors, exit 2/3."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from click.testing import CliRunner
from vizkit import multiturn_graph, real_run, repo  # noqa: F401 (pytest fixtures)

from graphrl.cli import main


@pytest.fixture
def run(monkeypatch, repo):
    monkeypatch.chdir(repo)

    def go(*args):
        res = CliRunner().invoke(main, ["visualize", *map(str, args)], catch_exceptions=False)
        assert "Traceback" not in res.output
        return res

    return go


def test_help_has_an_example(run):
    res = run("--help")
    assert res.exit_code == 0 and "Example:" in res.output and "graphrl visualize graphs/agentflow.yaml" in res.output


@pytest.mark.parametrize(
    "ext, marker",
    [
        ("svg", "<svg"),
        ("dot", "digraph"),
        ("mmd", "flowchart TD"),
        ("html", "<!DOCTYPE html>"),
        ("txt", "start -> plan"),
    ],
)
def test_graph_formats(run, tmp_path, ext, marker):
    out = tmp_path / f"g.{ext}"
    res = run("graphs/agentflow.yaml", "-o", out)
    assert res.exit_code == 0, res.output
    assert marker in out.read_text()


def test_graph_from_a_compiled_plan_is_the_same_picture(run, tmp_path, repo):
    from graphrl.compilers.checks import check_file
    from graphrl.compilers.lower import lower
    from graphrl.plan import plan_json

    g, _ = check_file("graphs/memagent.yaml")
    (tmp_path / "plan.json").write_text(plan_json(lower(g)))
    assert run(tmp_path / "plan.json", "-o", tmp_path / "a.svg").exit_code == 0
    assert run("graphs/memagent.yaml", "-o", tmp_path / "b.svg").exit_code == 0
    assert (tmp_path / "a.svg").read_text() == (tmp_path / "b.svg").read_text()


def test_graphviz_engine(run, tmp_path):
    res = run("graphs/hello.yaml", "-o", tmp_path / "g.svg", "--engine", "graphviz")
    if shutil.which("dot") is None:
        assert res.exit_code == 2 and "apt-get install graphviz" in res.output
    else:
        assert res.exit_code == 0 and "<svg" in (tmp_path / "g.svg").read_text()


def test_trajectory_formats(run, tmp_path, real_run, multiturn_graph):
    res = run(real_run, "-o", tmp_path / "t.html", "--graph", multiturn_graph, "--tokenizer", "none")
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output
    res = run(real_run, "-o", tmp_path / "t.json")
    trace = json.loads((tmp_path / "t.json").read_text())
    assert res.exit_code == 0 and trace["traceEvents"]
    res = run(real_run, "--group", 1, "--sample", 0, "--no-color", "--tokenizer", "none")
    assert res.exit_code == 0 and "== group 1 · sample 0" in res.output and "group 0" not in res.output
    assert "\x1b[" not in res.output


def test_trajectory_finds_its_graph_by_name(run, tmp_path, real_run, multiturn_graph):
    # graphs/<name>.yaml next to the trajectory is found without --graph
    (tmp_path / "graphs").mkdir()
    shutil.copy(multiturn_graph, tmp_path / "graphs" / "multiturn.yaml")
    shutil.copy(real_run, tmp_path / "t.jsonl")
    assert run(tmp_path / "t.jsonl", "-o", tmp_path / "t.html", "--tokenizer", "none").exit_code == 0
    html = (tmp_path / "t.html").read_text()
    assert 'data-node="turn"' in html and "not found" not in html
    # elsewhere: the transitions taken are drawn, with a notice
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(real_run, other / "t.jsonl")
    shutil.rmtree(tmp_path / "graphs")
    assert run(other / "t.jsonl", "-o", other / "t.html", "--tokenizer", "none").exit_code == 0
    html = (other / "t.html").read_text()
    assert "graph 'multiturn' not found" in html and 'data-src="turn" data-dst="observe"' in html


def test_missing_file(run):
    res = run("nope.yaml", "-o", "x.svg")
    assert res.exit_code == 2 and "does not exist" in res.output


def test_unknown_extensions(run, tmp_path, real_run):
    res = run("graphs/hello.yaml", "-o", tmp_path / "g.png")
    assert res.exit_code == 2 and "cannot tell the output format from" in res.output and ".svg" in res.output
    res = run(real_run, "-o", tmp_path / "t.svg")
    assert res.exit_code == 2 and "for a trajectory use" in res.output
    weird = tmp_path / "t.csv"
    weird.write_text("a,b\n")
    res = run(weird, "-o", tmp_path / "t.html")
    assert res.exit_code == 2 and "cannot tell what this is" in res.output


def test_malformed_jsonl_is_located(run, tmp_path, real_run):
    bad = tmp_path / "bad.jsonl"
    lines = real_run.read_text().splitlines()
    bad.write_text(lines[0] + "\n{not json}\n" + lines[1] + "\n")
    res = run(bad, "-o", tmp_path / "t.html")
    assert res.exit_code == 3
    assert re.search(r"bad\.jsonl:2:\d+: not valid JSON", res.output), res.output


def test_graph_with_errors_exits_3(run, tmp_path):
    g = tmp_path / "bad.yaml"
    g.write_text("name: bad\nnodes:\n  a:\n    llm: policy\n    prompt: [user: hi]\n    next: plann\n")
    res = run(g, "-o", tmp_path / "g.svg")
    assert res.exit_code == 3 and "bad.yaml:6" in res.output and "the graph has errors" in res.output


def test_options_that_do_not_fit(run, tmp_path, real_run):
    res = run("graphs/hello.yaml", "-o", tmp_path / "g.svg", "--group", 0)
    assert res.exit_code == 2 and "--group applies to trajectories" in res.output
    res = run(real_run, "-o", tmp_path / "t.html", "--group", 9)
    assert res.exit_code == 2 and "group 9 is not in" in res.output
    res = run(real_run, "--format", "html")
    assert res.exit_code == 2 and "needs -o" in res.output
