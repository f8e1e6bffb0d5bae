"""graphrl.spec.schema and graphrl.spec.builtins: the JSON Schema mirrors the checker; built-ins are documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from graphrl.spec.builtins import BUILTIN_GROUP_REWARDS, BUILTIN_REWARDS, BUILTIN_TOOLS
from graphrl.spec.schema import graph_json_schema

REPO = Path(__file__).resolve().parents[2]
jsonschema = pytest.importorskip("jsonschema")


@pytest.fixture(scope="module")
def validator():
    schema = graph_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


SHORTHANDS = """\
name: s
inputs: {q: prompt, a: {from: label, required: false}}
state: {memory: "No previous memory", n: 0, notes: {default: [], merge: append}}
threads:
  main: {prompt: "{{ q }}"}
nodes:
  a: {llm: policy, prompt: "{{ q }}", next: b, append_to: main}
  b: {llm: policy, prompt: ["{{ q }}", {user: hi}], foreach: memory, next: [{when: "n > 1", goto: end}, {goto: c}]}
  c: {tool: python, args: {code: "1"}}
  d: {switch: "n", cases: {"1": end}, default: end}
reward: exact_match
"""


def test_schema_accepts_every_shorthand(validator):
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(SHORTHANDS))]
    assert errors == []


@pytest.mark.parametrize("graph", sorted((REPO / "graphs").glob("*.yaml")), ids=lambda p: p.stem)
def test_schema_accepts_bundled_graphs(validator, graph):
    assert [e.message for e in validator.iter_errors(yaml.safe_load(graph.read_text()))] == []


@pytest.mark.parametrize(
    "path", [(), ("nodes", "a"), ("nodes", "c"), ("nodes", "d"), ("threads", "main"), ("state", "notes")]
)
def test_schema_rejects_unknown_keys(validator, path):
    doc = yaml.safe_load(SHORTHANDS)
    target = doc
    for p in path:
        target = target[p]
    target["zz_unknown"] = 1
    assert not validator.is_valid(doc)


def test_schema_requires_name_and_nodes(validator):
    assert not validator.is_valid({"nodes": {"a": {"llm": "policy", "prompt": "x"}}})
    assert not validator.is_valid({"name": "g"})


def test_builtin_signatures_are_consistent():
    for table in (BUILTIN_TOOLS, BUILTIN_REWARDS, BUILTIN_GROUP_REWARDS):
        for name, sig in table.items():
            assert re.fullmatch(r"[a-z][a-z0-9_]*", name)
            assert not set(sig.required) & set(sig.optional), name
            assert sig.summary, name


def test_builtins_are_documented_in_the_language_guide():
    doc = REPO / "docs" / "graph-language.md"
    if not doc.exists():
        pytest.skip("docs/graph-language.md not written yet")
    text = doc.read_text(encoding="utf-8")
    missing = [n for n in (*BUILTIN_TOOLS, *BUILTIN_REWARDS, *BUILTIN_GROUP_REWARDS) if f"`{n}`" not in text]
    assert missing == [], f"docs/graph-language.md does not mention: {missing}"
