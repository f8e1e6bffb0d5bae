"""graphrl.spec.load: graph file -> located, typed Graph (or diagnostics); template sources and sites."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphrl.spec.load import load_graph
from graphrl.spec.model import LLMNode, SwitchNode, ToolNode, UpdateNode

REPO = Path(__file__).resolve().parents[2]

GRAPH = """\
name: g
inputs:
  question: prompt
state:
  notes: {default: [], merge: append}
threads:
  main:
    prompt:
      - system: prompts/sys.j2
      - user: "{{ question }}"
nodes:
  turn:
    llm: policy
    thread: main
    max_visits: 3
    parse: {tags: [verdict]}
    next: route
  route:
    switch: turn.verdict
    cases: {run: run}
    default: end
  run:
    tool: python
    args: {code: 'print({{ turn.text | tojson }})'}
    append_to: main
    next: note
  note:
    update:
      notes: |
        step {{ visits.turn }}:
        {{ run.text }}
    next:
      - when: "visits.turn < 3"
        goto: turn
      - goto: end
"""


@pytest.fixture
def graph_file(tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "sys.j2").write_text("You run code.\nBe brief.\n")
    f = tmp_path / "g.yaml"
    f.write_text(GRAPH)
    return f


def test_loads_a_typed_graph(graph_file):
    g, diags = load_graph(graph_file)
    assert diags == []
    assert [type(n) for n in g.nodes.values()] == [LLMNode, SwitchNode, ToolNode, UpdateNode]
    assert g.start == "turn"
    assert g.file == str(graph_file) and g.base_dir == graph_file.parent


def test_spans_of_values_and_keys(graph_file):
    g, _ = load_graph(graph_file)
    assert (g.span("nodes", "turn", "llm").line, g.span("nodes", "turn", "llm").col) == (13, 10)
    assert (g.span("nodes", "route", key=True).line, g.span("nodes", "route", key=True).col) == (18, 3)


def test_template_files_are_read_with_their_own_location(graph_file):
    g, _ = load_graph(graph_file)
    src = g.templates[("threads", "main", "prompt", 0, "system")]
    assert src.text == "You run code.\nBe brief.\n"
    assert src.file == str(graph_file.parent / "prompts" / "sys.j2") and not src.inline
    assert (src.span(2).line, src.span(2).col) == (2, 1)


def test_sites_cover_every_template_and_expression(graph_file):
    g, _ = load_graph(graph_file)
    sites = {s.path: s.kind for s in g.sites()}
    assert sites == {
        ("inputs", "question", "from"): "expression",
        ("threads", "main", "prompt", 0, "system"): "template",
        ("threads", "main", "prompt", 1, "user"): "template",
        ("nodes", "route", "switch"): "expression",
        ("nodes", "run", "args", "code"): "template",
        ("nodes", "run", "append_to", "content"): "template",
        ("nodes", "note", "update", "notes"): "template",
        ("nodes", "note", "next", 0, "when"): "expression",
    }


def test_inline_sources_point_into_the_yaml(graph_file):
    g, _ = load_graph(graph_file)
    by_path = {s.path: s.source for s in g.sites()}
    quoted = by_path[("threads", "main", "prompt", 1, "user")]
    assert (quoted.line, quoted.col) == (10, 16)  # after the opening quote
    span = quoted.span(1, "question")
    assert (span.line, span.col, span.end_col) == (10, 19, 27)
    block = by_path[("nodes", "note", "update", "notes")]
    assert (block.line, block.col) == (30, 9)  # first line of the | block, its indentation stripped
    span = block.span(2, "run")
    assert (span.line, span.col, span.end_col) == (31, 12, 15)


def test_prompt_shorthand_block_is_located(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("name: g\nnodes:\n  a:\n    llm: policy\n    prompt: |\n      one\n      {{ two }}\n")
    g, _ = load_graph(f)
    (site,) = [s for s in g.sites() if s.path[:3] == ("nodes", "a", "prompt")]
    span = site.source.span(2, "two")
    assert (span.line, span.col) == (7, 10)


def test_graph_with_only_unknown_keys_is_still_returned(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("name: g\ncolour: red\nnodes:\n  a: {llm: policy, prompt: hi, size: 3}\n")
    g, diags = load_graph(f)
    assert g is not None
    assert [(d.code, d.span.line) for d in diags] == [("E002", 2), ("E002", 4)]


def test_other_schema_errors_give_no_graph(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("name: g\nnodes:\n  a: {llm: policy, prompt: hi, max_tokens: many}\n")
    g, diags = load_graph(f)
    assert g is None and [d.code for d in diags] == ["E003"]


def test_missing_graph_file_is_e007(tmp_path):
    g, diags = load_graph(tmp_path / "none.yaml")
    assert g is None and [d.code for d in diags] == ["E007"]


def test_undecodable_graph_file_is_e007(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_bytes(b"name: \xff\xfe\n")
    g, diags = load_graph(f)
    assert g is None and [d.code for d in diags] == ["E007"]


def test_an_over_large_graph_file_is_e007_before_it_is_parsed(tmp_path, monkeypatch):
    from graphrl.spec import load as load_mod

    monkeypatch.setattr(load_mod, "MAX_GRAPH_BYTES", 64)
    f = tmp_path / "g.yaml"
    f.write_text("name: g\nnodes:\n" + "".join(f"  n{i}: {{llm: policy, prompt: hi}}\n" for i in range(10)))
    g, diags = load_graph(f)
    assert g is None and [d.code for d in diags] == ["E007"]
    assert "larger than 64 bytes" in diags[0].message and diags[0].hint
    f.write_text("name: g\nnodes: {}\n")  # under the bound: parsed (and found wanting, not refused)
    assert all(d.code != "E007" for d in load_graph(f)[1])


def test_a_device_file_is_refused_without_reading_it_whole():
    g, diags = load_graph("/dev/zero")
    assert g is None and [d.code for d in diags] == ["E007"]


def test_templates_key_sets_the_template_directory(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.j2").write_text("A {{ q }}")
    (tmp_path / "graphs").mkdir()
    f = tmp_path / "graphs" / "g.yaml"
    f.write_text("name: g\ntemplates: ../p\ninputs: {q: prompt}\nnodes:\n  a: {llm: policy, prompt: [user: a.j2]}\n")
    g, diags = load_graph(f)
    assert diags == [] and g.templates[("nodes", "a", "prompt", 0, "user")].text == "A {{ q }}"


@pytest.mark.parametrize("graph", sorted((REPO / "graphs").glob("*.yaml")), ids=lambda p: p.stem)
def test_bundled_graphs_load_cleanly(graph):
    g, diags = load_graph(graph)
    assert g is not None and diags == []


def test_unreadable_template_file_is_e007_with_the_reason(tmp_path):
    (tmp_path / "bad.j2").write_bytes(b"\xff\xfe{{ x }}")
    (tmp_path / "dir.j2").mkdir()
    f = tmp_path / "g.yaml"
    f.write_text("name: g\nnodes:\n  a: {llm: policy, prompt: [user: bad.j2, system: dir.j2]}\n")
    g, diags = load_graph(f)
    assert g is None
    assert [d.code for d in diags] == ["E007", "E007"]
    assert "cannot read template file" in diags[0].message and "utf-8" in diags[0].message
    assert "is not a regular file" in diags[1].message  # a directory named like a template
