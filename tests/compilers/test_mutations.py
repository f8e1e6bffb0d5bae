"""Property: random mutations of the valid bundled graphs give diagnostics, never a traceback.

Each example takes a bundled graph (as a YAML tree, or as text), applies random mutations, writes
it next to a link to the repository's prompts/ (so relative template paths still resolve) and runs
`check_file`. It must return a list of `Diagnostic` and never raise. Where a mutation makes the
graph invalid by construction (an edge to a node that does not exist, a dropped node that is still
referenced, a duplicated node id, an unclosed `{{`/`{%` in a template, a missing required key),
at least one error must be reported.
"""

from __future__ import annotations

import copy
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphrl.compilers.checks import check_file
from graphrl.spec.diagnostics import Diagnostic, has_errors

REPO = Path(__file__).resolve().parents[2]
GRAPH_FILES = sorted((REPO / "graphs").glob("*.yaml"))
TEXTS = {f.stem: f.read_text(encoding="utf-8") for f in GRAPH_FILES}
TREES = {k: yaml.safe_load(v) for k, v in TEXTS.items()}
NAMES = sorted(TEXTS)
TERMINALS = {"end", "abort"}

# GRAPHRL_FUZZ=N multiplies the example counts and draws fresh random examples (for bug hunts);
# by default the examples are derandomised, so CI runs are fast and reproducible.
FUZZ = int(os.environ.get("GRAPHRL_FUZZ", "1"))
SETTINGS = dict(
    deadline=None,
    derandomize=FUZZ == 1,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """tmp/graphs/<file>.yaml with tmp/prompts -> the repository's prompts (templates resolve as in graphs/)."""
    root = tmp_path_factory.mktemp("mutations")
    (root / "graphs").mkdir()
    if (REPO / "prompts").is_dir():
        (root / "prompts").symlink_to(REPO / "prompts", target_is_directory=True)
    return root


def run_check(workdir: Path, text: str) -> list[Diagnostic]:
    f = workdir / "graphs" / "mutant.yaml"
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    result = check_file(f)  # must not raise
    assert isinstance(result, tuple) and len(result) == 2
    _, diags = result
    assert isinstance(diags, list) and all(isinstance(d, Diagnostic) for d in diags)
    for d in diags:
        d.render()  # rendering never raises either
        d.to_json()
    return diags


def dump(tree: Any) -> str:
    return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=1 << 16)


# ---------------------------------------------------------------- strategies

WEIRD_STRINGS = [
    "{{",
    "{%",
    "}}",
    "%}",
    "{#",
    "{{ }}",
    "{% if %}",
    "{{ x.y.z }}",
    "\\boxed{",
    ":",
    "a:b",
    "..x:y",
    "os:path",
    "\x00",
    "\u202e",
    "\ud7ff",
    "\U0001f600",
    "🙂" * 50,
    "\t",
    "\n\n",
    "---",
    "&a",
    "*a",
    "!!python/object:os.system",
    "' \"",
    "",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**18, max_value=10**40),
    st.integers(max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(WEIRD_STRINGS),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
key_names = st.one_of(
    st.text(min_size=0, max_size=10), st.sampled_from(WEIRD_STRINGS), st.integers(), st.booleans(), st.none()
)
unknown_names = st.text(min_size=1, max_size=10).filter(lambda s: s.strip() == s and s not in TERMINALS)


def paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path in the tree (the root excluded)."""
    out = []
    if isinstance(tree, dict):
        items = list(tree.items())
    elif isinstance(tree, list):
        items = list(enumerate(tree))
    else:
        return out
    for k, v in items:
        out.append(prefix + (k,))
        out += paths(v, prefix + (k,))
    return out


def get(tree: Any, path: tuple) -> Any:
    for p in path:
        tree = tree[p]
    return tree


def typo(word: str, draw) -> str:
    if not word:
        return draw(st.text(min_size=1, max_size=4))
    i = draw(st.integers(0, len(word) - 1))
    op = draw(st.sampled_from(["drop", "swap", "insert", "case"]))
    if op == "drop":
        return word[:i] + word[i + 1 :]
    if op == "swap" and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if op == "case":
        return word.swapcase()
    return word[:i] + draw(st.characters()) + word[i:]


def mutate_tree(tree: Any, draw) -> Any:
    """One random structural mutation, in place; returns the tree (which may be replaced)."""
    all_paths = paths(tree)
    if not all_paths:
        return draw(values)
    kind = draw(st.sampled_from(["delete", "rename", "retype", "string", "edge", "drop_node", "dup_list_item"]))
    path = draw(st.sampled_from(all_paths))
    parent = get(tree, path[:-1])
    key = path[-1]
    if kind == "delete":
        del parent[key]
    elif kind == "rename" and isinstance(parent, dict):
        new = draw(st.one_of(key_names, st.just(typo(str(key), draw))))
        value = parent.pop(key)
        parent[new] = value
    elif kind == "retype":
        parent[key] = draw(values)
    elif kind == "string":
        strings = [p for p in all_paths if isinstance(get(tree, p), str)]
        if strings:
            p = draw(st.sampled_from(strings))
            s = get(tree, p)
            i = draw(st.integers(0, len(s)))
            piece = draw(st.one_of(st.sampled_from(WEIRD_STRINGS), st.text(max_size=8)))
            get(tree, p[:-1])[p[-1]] = s[:i] + piece + s[i:]
    elif kind == "edge":
        refs = edge_refs(tree)
        if refs:
            p = draw(st.sampled_from(refs))
            get(tree, p[:-1])[p[-1]] = draw(st.one_of(unknown_names, st.sampled_from(node_ids(tree) or ["x"])))
    elif kind == "drop_node":
        ids = node_ids(tree)
        if ids:
            del tree["nodes"][draw(st.sampled_from(ids))]
    elif kind == "dup_list_item" and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    return tree


def node_ids(tree: Any) -> list[str]:
    nodes = tree.get("nodes") if isinstance(tree, dict) else None
    return list(nodes) if isinstance(nodes, dict) else []


def edge_refs(tree: Any) -> list[tuple]:
    """Paths of every value that names a node: start, next, goto, cases, default, on_limit."""
    out: list[tuple] = []
    if not isinstance(tree, dict):
        return out
    if isinstance(tree.get("start"), str):
        out.append(("start",))
    for nid, n in (tree.get("nodes") or {}).items() if isinstance(tree.get("nodes"), dict) else ():
        if not isinstance(n, dict):
            continue
        base = ("nodes", nid)
        if isinstance(n.get("next"), str):
            out.append(base + ("next",))
        elif isinstance(n.get("next"), list):
            out += [
                base + ("next", i, "goto")
                for i, b in enumerate(n["next"])
                if isinstance(b, dict) and isinstance(b.get("goto"), str)
            ]
        if "switch" in n and isinstance(n.get("cases"), dict):
            out += [base + ("cases", k) for k, v in n["cases"].items() if isinstance(v, str)]
        for k in ("default", "on_limit"):
            if "switch" in n or k == "on_limit":
                if isinstance(n.get(k), str):
                    out.append(base + (k,))
    return out


def referenced(tree: dict) -> set[str]:
    return {get(tree, p) for p in edge_refs(tree)}


def prompt_strings(tree: dict) -> list[tuple]:
    """Paths of the message strings of llm nodes and threads (always templates)."""
    out = []
    for section in ("nodes", "threads"):
        for nid, n in (tree.get(section) or {}).items():
            if not isinstance(n, dict) or (section == "nodes" and "llm" not in n):
                continue
            prompt = n.get("prompt")
            if isinstance(prompt, str):
                out.append((section, nid, "prompt"))
            elif isinstance(prompt, list):
                for i, m in enumerate(prompt):
                    if isinstance(m, str):
                        out.append((section, nid, "prompt", i))
                    elif isinstance(m, dict) and len(m) == 1 and isinstance(next(iter(m.values())), str):
                        out.append((section, nid, "prompt", i, next(iter(m))))
    return out


# ---------------------------------------------------------------- the properties


@settings(max_examples=60 * FUZZ, **SETTINGS)
@given(data=st.data())
def test_random_tree_mutations_never_raise(workdir, data):
    name = data.draw(st.sampled_from(NAMES), label="graph")
    tree = copy.deepcopy(TREES[name])
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        tree = mutate_tree(tree, data.draw)
    run_check(workdir, dump(tree))


@settings(max_examples=30 * FUZZ, **SETTINGS)
@given(data=st.data())
def test_random_text_mutations_never_raise(workdir, data):
    """Text-level: truncate the file at a random point, or splice in random characters."""
    name = data.draw(st.sampled_from(NAMES), label="graph")
    text = TEXTS[name]
    op = data.draw(st.sampled_from(["truncate", "insert", "both"]))
    if op in ("truncate", "both"):
        text = text[: data.draw(st.integers(0, len(text)))]
    if op in ("insert", "both"):
        i = data.draw(st.integers(0, len(text)))
        piece = data.draw(st.one_of(st.text(max_size=6), st.sampled_from(WEIRD_STRINGS)))
        text = text[:i] + piece + text[i:]
    run_check(workdir, text)


@settings(max_examples=10 * FUZZ, **SETTINGS)
@given(data=st.data())
def test_random_bytes_never_raise(workdir, data):
    """Byte-level: corrupt the file's encoding (invalid UTF-8 is E007, never a crash)."""
    name = data.draw(st.sampled_from(NAMES), label="graph")
    raw = TEXTS[name].encode("utf-8")
    i = data.draw(st.integers(0, len(raw)), label="at")
    raw = raw[:i] + data.draw(st.binary(min_size=1, max_size=8), label="bytes") + raw[i:]
    f = workdir / "graphs" / "mutant.yaml"
    f.write_bytes(raw)
    _, diags = check_file(f)
    assert all(isinstance(d, Diagnostic) for d in diags)


@settings(max_examples=20 * FUZZ, **SETTINGS)
@given(data=st.data())
def test_unknown_edge_target_is_an_error(workdir, data):
    name = data.draw(st.sampled_from(NAMES), label="graph")
    tree = copy.deepcopy(TREES[name])
    refs = edge_refs(tree)
    if not refs:  # a graph with no explicit edges: give its first node one
        first = node_ids(tree)[0]
        tree["nodes"][first]["next"] = "x"
        refs = [("nodes", first, "next")]
    path = data.draw(st.sampled_from(refs), label="edge")
    target = data.draw(unknown_names.filter(lambda s: s not in node_ids(tree)), label="target")
    get(tree, path[:-1])[path[-1]] = target
    diags = run_check(workdir, dump(tree))
    assert any(d.code == "E101" for d in diags), [d.render() for d in diags]


@settings(max_examples=15 * FUZZ, **SETTINGS)
@given(data=st.data())
def test_dropping_a_referenced_node_is_an_error(workdir, data):
    name = data.draw(st.sampled_from(NAMES), label="graph")
    tree = copy.deepcopy(TREES[name])
    ids = node_ids(tree)
    nid = data.draw(st.sampled_from(ids), label="node")
    del tree["nodes"][nid]
    diags = run_check(workdir, dump(tree))
    if nid in referenced(tree) or not tree["nodes"]:
        assert has_errors(diags), [d.render() for d in diags]


@settings(max_examples=15 * FUZZ, **SETTINGS)
@given(data=st.data())
def test_unclosed_jinja_in_a_prompt_is_an_error(workdir, data):
    name = data.draw(st.sampled_from(NAMES), label="graph")
    tree = copy.deepcopy(TREES[name])
    path = data.draw(st.sampled_from(prompt_strings(tree)), label="message")
    opener = data.draw(st.sampled_from(["{{", "{%", "{{ x", "{% if x %}"]), label="opener")
    get(tree, path[:-1])[path[-1]] += opener
    diags = run_check(workdir, dump(tree))
    assert any(d.code == "E201" for d in diags), [d.render() for d in diags]


@pytest.mark.parametrize("name", NAMES)
def test_duplicating_a_node_is_an_error(workdir, name):
    """Text-level: copy the first node's block under nodes: right after itself -> E005."""
    lines = TEXTS[name].splitlines(keepends=True)
    start = next(i for i, l in enumerate(lines) if l.startswith("nodes:"))
    first = next(i for i in range(start + 1, len(lines)) if re.match(r"^  [^\s#]", lines[i]))
    end = next((i for i in range(first + 1, len(lines)) if re.match(r"^(  )?[^\s#]", lines[i])), len(lines))
    text = "".join(lines[:end] + lines[first:end] + lines[end:])
    diags = run_check(workdir, text)
    assert [d.code for d in diags if d.severity == "error"] == ["E005"], [d.render() for d in diags]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("key", ["name", "nodes"])
def test_deleting_a_required_key_is_an_error(workdir, name, key):
    tree = copy.deepcopy(TREES[name])
    del tree[key]
    diags = run_check(workdir, dump(tree))
    assert any(d.code == "E006" for d in diags), [d.render() for d in diags]


@pytest.mark.parametrize("name", NAMES)
def test_unmutated_graphs_round_trip_through_the_dumper(workdir, name):
    """The harness itself: re-dumping an unmutated tree keeps the graph valid."""
    diags = run_check(workdir, dump(TREES[name]))
    assert not has_errors(diags), [d.render() for d in diags]


@pytest.mark.parametrize("value", [10**40, -(10**40), math.inf, -math.inf, math.nan, "{{", True, None, [], {}])
@pytest.mark.parametrize("field", ["max_tokens", "max_visits", "temperature", "llm", "prompt", "next", "parse"])
def test_odd_values_in_a_node_field(workdir, field, value):
    tree = (
        copy.deepcopy(TREES["hello"])
        if "hello" in TREES
        else {"name": "h", "nodes": {"solve": {"llm": "policy", "prompt": "hi"}}}
    )
    first = node_ids(tree)[0]
    tree["nodes"][first][field] = value
    run_check(workdir, dump(tree))
