"""Hostile graph files: nesting past 200 levels (flow or block) and merge-key alias bombs are located
E001 diagnostics (exit 3), never a RecursionError or gigabytes of memory. Memory and time per case
are measured by `python -m benchmarks.hostile_inputs`, not here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphrl.compilers.checks import check_file
from graphrl.spec import yamlsrc
from graphrl.spec.yamlsrc import MAX_VALUES, load_yaml

MAX_DEPTH = getattr(yamlsrc, "MAX_DEPTH", 200)

NODES = "name: g\nnodes:\n  a: {llm: policy, prompt: hi}\n"


def flow(depth: int) -> str:
    return NODES + "x: " + "[" * depth + "]" * depth + "\n"


def block(depth: int) -> str:
    return NODES + "".join("  " * i + "k:\n" for i in range(depth)) + "  " * depth + "v: 1\n"


def merge_bomb(levels: int, width: int = 2) -> str:
    lines = ["l0: &l0 {a: 1, b: 2}"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} {{<<: [{', '.join([f'*l{i - 1}'] * width)}], k{i}: {i}}}")
    return NODES + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text",
    [flow(100_000), flow(MAX_DEPTH + 5), block(1_500), block(MAX_DEPTH + 5)],
    ids=["flow_100k", "flow_205", "block_1500", "block_205"],
)
def test_deep_nesting_is_a_located_e001(tmp_path, text):
    f = tmp_path / "deep.yaml"
    f.write_text(text)
    g, diags = check_file(f)
    assert g is None
    (d,) = [d for d in diags if d.code == "E001"]
    assert "nested more than 200 levels" in d.message
    assert d.span.file == str(f) and d.span.line >= 4  # at the bracket / key that went too deep


def test_nesting_at_the_limit_still_loads():
    loc = load_yaml("x: " + "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2) + "\n", "f.yaml")
    assert not loc.diagnostics


@pytest.mark.parametrize("levels", [24, 60])
def test_a_merge_key_bomb_is_refused_before_it_is_expanded(levels):
    loc = load_yaml(merge_bomb(levels), "bomb.yaml")
    (d,) = loc.diagnostics
    assert d.code == "E001" and f"more than {MAX_VALUES} values" in d.message and d.span.line > 3


def test_merged_keys_count_toward_the_value_limit():
    # 15 levels of doubling: 2**15 * 2 merged pairs, each a key and a value: over 100,000 only merged
    loc = load_yaml(merge_bomb(16), "m.yaml")
    assert [d.code for d in loc.diagnostics] == ["E001"]
    small = load_yaml(merge_bomb(3), "m.yaml")  # merges still work
    assert not small.diagnostics and small.value["l3"] == {"a": 1, "b": 2, "k1": 1, "k2": 2, "k3": 3}


def test_graphrl_check_exits_3_on_deep_nesting(tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text(flow(100_000))
    p = subprocess.run(
        [sys.executable, "-m", "graphrl.cli", "check", str(f)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 3, p.stderr[-2000:]
    assert "error[E001]" in p.stderr and "internal error" not in p.stderr and "Traceback" not in p.stderr


def test_a_flat_document_of_too_many_values_stops_while_composing():
    loc = load_yaml(NODES + "x: [" + "1," * (MAX_VALUES + 10) + "1]\n", "flat.yaml")
    (d,) = loc.diagnostics
    assert d.code == "E001" and f"more than {MAX_VALUES} values" in d.message and d.span.line == 4
