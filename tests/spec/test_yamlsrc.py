"""graphrl.spec.yamlsrc: YAML text -> values with a span for every value and key."""

from __future__ import annotations

import pytest

from graphrl.spec.diagnostics import Span
from graphrl.spec.yamlsrc import load_yaml

DOC = """\
name: g
nodes:
  a:
    llm: policy
    prompt:
      - user: "hi {{ q }}"
    stop: [x, 'y']
  b:
    update: |
      line one
      line two
"""


def test_values_and_spans():
    loc = load_yaml(DOC, "g.yaml")
    assert loc.diagnostics == []
    assert loc.value["nodes"]["a"]["prompt"] == [{"user": "hi {{ q }}"}]
    assert loc.spans[("name",)] == Span("g.yaml", 1, 7, 8)
    assert loc.key_spans[("name",)] == Span("g.yaml", 1, 1, 5)
    assert loc.spans[("nodes", "a", "llm")] == Span("g.yaml", 4, 10, 16)
    assert loc.spans[("nodes", "a", "prompt", 0, "user")] == Span("g.yaml", 6, 15, 27)
    assert loc.spans[("nodes", "a", "stop", 1)] == Span("g.yaml", 7, 15, 18)
    assert loc.key_spans[("nodes", "b")] == Span("g.yaml", 8, 3, 4)


def test_block_scalars_are_marked():
    loc = load_yaml(DOC, "g.yaml")
    assert loc.block_paths == {("nodes", "b", "update")}
    assert loc.value["nodes"]["b"]["update"] == "line one\nline two\n"


def test_span_falls_back_to_nearest_ancestor():
    loc = load_yaml(DOC, "g.yaml")
    assert loc.span(("nodes", "a", "nope", 3)) == loc.spans[("nodes", "a")]
    assert loc.span(("nodes", "a", "nope"), key=True) == loc.key_spans[("nodes", "a")]
    assert loc.span(("zzz",)) == loc.spans[()]
    assert loc.span(("nodes", "a"), key=True) == Span("g.yaml", 3, 3, 4)


def test_duplicate_keys_are_reported_not_merged():
    loc = load_yaml("a: 1\nb: 2\na: 3\n", "g.yaml")
    (d,) = loc.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("E004", 3, 1)
    assert "first defined at line 1" in d.message
    assert loc.value == {"a": 1, "b": 2}


def test_duplicate_node_ids_are_e005():
    loc = load_yaml("nodes:\n  a: {}\n  a: {}\n", "g.yaml")
    assert [(d.code, d.span.line, d.span.col) for d in loc.diagnostics] == [("E005", 3, 3)]


def test_duplicate_key_called_nodes_elsewhere_is_e004():
    loc = load_yaml("x:\n  nodes:\n    a: 1\n    a: 2\n", "g.yaml")
    assert [d.code for d in loc.diagnostics] == ["E004"]


def test_syntax_error_is_located():
    loc = load_yaml("a: [1, 2\nb: 3\n", "g.yaml")
    (d,) = loc.diagnostics
    assert d.code == "E001" and d.span.file == "g.yaml" and d.span.line >= 1


def test_tab_indentation_is_e001():
    loc = load_yaml("a:\n\tb: 1\n", "g.yaml")
    assert [d.code for d in loc.diagnostics] == ["E001"]
    assert loc.diagnostics[0].span.line == 2


def test_several_documents_are_e001():
    loc = load_yaml("a: 1\n---\nb: 2\n", "g.yaml")
    assert [(d.code, d.span.line) for d in loc.diagnostics] == [("E001", 3)]


def test_empty_document_is_an_empty_mapping():
    for text in ("", "# only a comment\n"):
        loc = load_yaml(text, "g.yaml")
        assert loc.value == {} and loc.diagnostics == []


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system ['echo hi']\n",  # a collection: must not pass silently either
        "a: !!python/name:os.system x\n",
        "a: !custom 5\n",
        "a: !!set {x, y}\n",
    ],
)
def test_unsafe_or_unknown_tags_are_located_e001(text):
    loc = load_yaml(text, "g.yaml")
    assert [(d.code, d.span.line, d.span.col) for d in loc.diagnostics] == [("E001", 1, 4)]


def test_standard_scalar_tags_are_fine():
    loc = load_yaml("a: !!str 5\nb: !!int '7'\n", "g.yaml")
    assert loc.diagnostics == [] and loc.value == {"a": "5", "b": 7}


def test_recursive_alias_is_an_error_not_a_hang():
    loc = load_yaml("a: &a [*a]\n", "g.yaml")
    assert [d.code for d in loc.diagnostics] == ["E001"]


def test_merge_keys():
    loc = load_yaml("base: &b {x: 1}\nm:\n  <<: *b\n  y: 2\n", "g.yaml")
    assert loc.diagnostics == []
    assert loc.value["m"] == {"x": 1, "y": 2}
    assert loc.spans[("m", "y")].line == 4


def test_non_string_keys_keep_their_type():
    loc = load_yaml("1: a\nfalse: b\n~: c\n[x]: d\n", "g.yaml")
    assert list(loc.value) == [1, False, None, "['x']"]
    assert loc.key_spans[(False,)].line == 2 and loc.key_spans[(None,)].line == 3


def test_alias_expansion_is_bounded():
    """`a1: [*a0 x10]`, `a2: [*a1 x10]`, ...: the expansion is refused quickly, not walked for minutes."""
    import time

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    t = time.monotonic()
    loc = load_yaml("\n".join(lines) + "\n", "g.yaml")
    assert time.monotonic() - t < 5
    assert [d.code for d in loc.diagnostics] == ["E001"]
    assert "aliases are expanded" in loc.diagnostics[0].message


def test_yes_no_keys_stay_names_while_true_false_stay_booleans():
    """A switch written `cases: {yes: a, no: b}` must match the text 'yes', not the boolean True."""
    loc = load_yaml("cases: {yes: a, no: b, on: c, true: d}\n", "g.yaml")
    assert list(loc.value["cases"]) == ["yes", "no", "on", True]
