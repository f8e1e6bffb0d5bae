"""Hostile inputs of the kinds an independent battery found unbounded: deep YAML nesting, a merge-key
alias bomb, an over-long data row, a prompt far over the bound. Each ends in a located error, fast
and small (`python -m benchmarks.hostile_inputs` measures time and peak memory per case)."""

from __future__ import annotations

import json

import pytest

from graphrl.data.jsonl import JsonlError, iter_jsonl
from graphrl.spec.yamlsrc import MAX_VALUES, load_yaml

FLOW = "a: " + "[" * 100_000 + "]" * 100_000
BLOCK = "".join("  " * i + f"k{i}:\n" for i in range(1500)) + "  " * 1500 + "v: 1\n"
MERGE_BOMB = "a0: &a0 {x: 1, y: 2}\n" + "".join(
    f"a{i}: &a{i}\n  <<: [*a{i - 1}, *a{i - 1}]\n  k{i}: 1\n" for i in range(1, 25)
)


@pytest.mark.parametrize("text", [FLOW, BLOCK], ids=["flow-brackets", "block-levels"])
def test_deep_nesting_is_e001_not_a_recursion_error(text):
    loc = load_yaml(text, "deep.yaml")
    (d,) = loc.diagnostics
    assert d.code == "E001" and "nested" in d.message and d.span.file == "deep.yaml"


def test_a_merge_key_bomb_is_refused_before_it_expands():
    loc = load_yaml(MERGE_BOMB, "bomb.yaml")
    (d,) = loc.diagnostics
    assert d.code == "E001" and str(MAX_VALUES) in d.message and "merge" in d.message and d.span.line > 1


def test_merge_keys_keep_their_meaning():
    loc = load_yaml("a: &a {x: 1}\nb: &b {x: 2, z: 3}\nm:\n  <<: [*a, *b]\n  w: 0\nn:\n  <<: *a\n  x: 9\n", "m.yaml")
    assert loc.diagnostics == []
    assert loc.value["m"] == {"x": 1, "z": 3, "w": 0} and loc.value["n"] == {"x": 9}


def test_an_over_long_row_is_refused_located_without_reading_it_whole(tmp_path):
    path = tmp_path / "rows.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"prompt": "ok"}) + "\n")
        f.write(json.dumps({"prompt": "x" * 5000}) + "\n")
    rows = iter_jsonl(path, max_line_bytes=1000)
    assert next(rows)[1] == {"prompt": "ok"}
    with pytest.raises(JsonlError, match=r"rows.jsonl:2:1: the line is longer than 1000 bytes"):
        next(rows)
