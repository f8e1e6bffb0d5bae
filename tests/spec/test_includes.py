"""YAML includes (`include: [shared/x.yaml]`, graphrl/spec/includes.py): sections merge into the graph
before it is checked, so `check`, `compile` and the plan see the merged graph; a diagnostic about an
included value is located in the included file; a name defined twice (E009), a missing file, a file
outside the graph's folder, a cycle or a section an include cannot hold (E008) are located errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from graphrl.compilers.checks import check_file
from graphrl.compilers.lower import plan_from_path
from graphrl.plan import plan_json

GRAPH = """\
name: inc
include: INCLUDES
constants:
  max_turns: 3
inputs:
  question: prompt
threads:
  main:
    prompt:
      - system: "{{ system_prompt }}"
      - user: "{{ question }}"
    tools: "{{ tool_schemas }}"
"""
TOOLS = """\
constants:
  system_prompt: "You can call tools."
  tool_schemas:
    - {type: function, function: {name: search, parameters: {type: object}}}
"""
NODES = """\
nodes:
  talk:
    llm: policy
    thread: main
    max_visits: $max_turns
    prompt: [user: "Go on."]
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root / "g.yaml"


def _graph(tmp: Path, includes: str = "[shared/tools.yaml, shared/nodes.yaml]", **files: str) -> Path:
    base = {"g.yaml": GRAPH.replace("INCLUDES", includes), "shared/tools.yaml": TOOLS, "shared/nodes.yaml": NODES}
    return _write(tmp, {**base, **{k.replace("__", "/").replace("_yaml", ".yaml"): v for k, v in files.items()}})


def _diags(path: Path, code: str | None = None) -> list[str]:
    _, diags = check_file(path)
    return [
        f"{d.code} {Path(d.span.file).name}:{d.span.line}:{d.span.col} {d.message}"
        for d in diags
        if d.span is not None and (code is None or d.code == code)
    ]


def test_included_sections_merge_into_the_plan(tmp_path):
    path = _graph(tmp_path)
    plan, diags = plan_from_path(path)
    assert plan is not None, [d.render() for d in diags]
    assert plan.constants["system_prompt"] == "You can call tools."
    assert plan.constants["tool_schemas"][0]["function"]["name"] == "search"
    assert list(plan.nodes) == ["talk"] and plan.nodes["talk"].max_visits == 3  # $max_turns from the graph
    data = json.loads(plan_json(plan))
    assert "include" not in data and not any(k.startswith("include") for k in data["spans"])  # self-contained
    assert data["spans"]["nodes.talk.max_visits"] == f"{_rel(tmp_path / 'shared' / 'nodes.yaml')}:5:17"


def _rel(p: Path) -> str:
    import os

    return Path(os.path.relpath(p)).as_posix()


def test_a_template_error_in_an_included_file_is_located_there(tmp_path):
    path = _graph(tmp_path, shared__nodes_yaml=NODES.replace("Go on.", "{{ nope }}"))
    assert _diags(path) == ["E202 nodes.yaml:6:24 'nope' is not bound by any input, state variable or upstream node"]


def test_an_unknown_constant_in_an_included_file_is_located_there(tmp_path):
    path = _graph(tmp_path, shared__nodes_yaml=NODES.replace("$max_turns", "$max_turn"))
    assert [d.split(" ")[1] for d in _diags(path, "E308")] == ["nodes.yaml:5:17"]


def test_a_name_defined_in_the_graph_and_an_include_is_e009_at_the_second(tmp_path):
    path = _graph(tmp_path, shared__tools_yaml=TOOLS + "  max_turns: 5\n")
    (d,) = _diags(path, "E009")
    assert d.startswith("E009 tools.yaml:5:3 constant 'max_turns' is defined twice: first at ")
    assert d.endswith("g.yaml:4:3")


def test_a_name_defined_in_two_includes_is_e009_in_the_later_one(tmp_path):
    path = _graph(tmp_path, shared__nodes_yaml=NODES + "threads:\n  main: {prompt: [user: hi]}\n")
    (d,) = _diags(path, "E009")
    assert d.startswith("E009 nodes.yaml:8:3 thread 'main' is defined twice") and d.endswith("g.yaml:8:3")


def test_a_whole_section_defined_twice_is_e009(tmp_path):
    graph = GRAPH.replace("INCLUDES", "shared/r.yaml") + "nodes: {a: {llm: policy, prompt: hi}}\nreward: exact_match\n"
    path = _write(tmp_path, {"g.yaml": graph, "shared/r.yaml": "reward: {fn: f1}\n"})
    assert [d.split(" ", 2)[:2] for d in _diags(path, "E009")] == [["E009", "r.yaml:1:1"]]


def test_an_include_cycle_is_e008_at_the_include_that_closes_it(tmp_path):
    path = _graph(
        tmp_path,
        includes="shared/a.yaml",
        shared__a_yaml="include: b.yaml\n" + TOOLS,
        shared__b_yaml="include: [a.yaml]\n" + NODES,
    )
    assert _diags(path) == ["E008 b.yaml:1:11 include cycle: g.yaml -> a.yaml -> b.yaml -> a.yaml"]


def test_a_file_included_twice_through_two_paths_is_merged_once(tmp_path):
    path = _graph(
        tmp_path,
        includes="[shared/a.yaml, shared/b.yaml]",
        shared__a_yaml="include: tools.yaml\n" + NODES,
        shared__b_yaml="include: tools.yaml\n",
    )
    assert _diags(path) == []


def test_a_missing_include_is_e008_with_a_suggestion(tmp_path):
    path = _graph(tmp_path, includes="[shared/tool.yaml, shared/nodes.yaml]")
    _, diags = check_file(path)
    (d,) = [d for d in diags if d.code == "E008"]
    assert (d.span.line, d.span.col) == (2, 11) and "not found" in d.message and "tools.yaml" in (d.hint or "")


def test_an_include_outside_the_graph_folder_is_e008_unless_templates_outside(tmp_path):
    (tmp_path / "elsewhere.yaml").write_text(TOOLS, encoding="utf-8")
    path = _graph(tmp_path / "g", includes="[../elsewhere.yaml, shared/nodes.yaml]")
    assert [d.split(" ")[:2] for d in _diags(path)] == [["E008", "g.yaml:2:11"]]
    assert "outside the graph's folder" in _diags(path)[0]
    path.write_text("templates_outside: true\n" + path.read_text(), encoding="utf-8")
    assert _diags(path) == []


def test_a_section_an_include_cannot_hold_is_e008_in_the_included_file(tmp_path):
    path = _graph(tmp_path, shared__tools_yaml="name: other\n" + TOOLS)
    assert _diags(path) == ["E008 tools.yaml:1:1 'name' cannot be included: it belongs to the graph file"]


def test_yaml_errors_and_bad_values_in_includes_are_located(tmp_path):
    path = _graph(tmp_path, shared__tools_yaml="constants: [unclosed\n")
    assert [d.split(" ")[:2] for d in _diags(path)] == [["E001", "tools.yaml:2:1"]]
    path = _graph(tmp_path, includes="[3]")
    assert [d.split(" ")[:2] for d in _diags(path)] == [["E008", "g.yaml:2:10"]]
    path = _graph(tmp_path, shared__tools_yaml="- a\n- b\n")
    assert [d.split(" ")[:2] for d in _diags(path, "E008")] == [["E008", "tools.yaml:1:1"]]


def test_the_plan_hash_follows_the_included_files(tmp_path):
    path = _graph(tmp_path)
    plan1, _ = plan_from_path(path)
    (tmp_path / "shared" / "tools.yaml").write_text(TOOLS.replace("call tools", "use tools"), encoding="utf-8")
    plan2, _ = plan_from_path(path)
    assert plan1 is not None and plan2 is not None
    assert plan1.source["sha256"] != plan2.source["sha256"]


def test_checking_a_fragment_on_its_own_says_it_is_checked_through_its_graph(tmp_path):
    frag = tmp_path / "shared.yaml"
    frag.write_text("constants: {max_turns: 3}\n", encoding="utf-8")
    _, diags = check_file(frag)
    name = next(d for d in diags if d.code == "E006" and "'name'" in d.message)
    assert "include:" in (name.hint or "")
