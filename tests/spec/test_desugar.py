"""graphrl.spec.desugar: each shorthand -> its canonical form; canonical input passes through."""

from __future__ import annotations

import copy

import pytest

from graphrl.spec.desugar import desugar

CASES = [
    ({"state": {"memory": "No previous memory"}}, {"state": {"memory": {"default": "No previous memory"}}}),
    ({"state": {"n": 0, "xs": []}}, {"state": {"n": {"default": 0}, "xs": {"default": []}}}),
    ({"inputs": {"question": "prompt"}}, {"inputs": {"question": {"from": "prompt"}}}),
    ({"nodes": {"a": {"next": "b"}}}, {"nodes": {"a": {"next": [{"goto": "b"}]}}}),
    ({"nodes": {"a": {"append_to": "main"}}}, {"nodes": {"a": {"append_to": {"thread": "main"}}}}),
    ({"nodes": {"a": {"foreach": "chunks"}}}, {"nodes": {"a": {"foreach": {"over": "chunks"}}}}),
    ({"nodes": {"a": {"prompt": "{{ messages }}"}}}, {"nodes": {"a": {"prompt": [{"messages": "{{ messages }}"}]}}}),
    (
        {"nodes": {"a": {"prompt": ["hi", {"user": "x"}]}}},
        {"nodes": {"a": {"prompt": [{"messages": "hi"}, {"user": "x"}]}}},
    ),
    ({"threads": {"t": {"prompt": "{{ m }}"}}}, {"threads": {"t": {"prompt": [{"messages": "{{ m }}"}]}}}),
    ({"reward": "exact_match"}, {"reward": {"fn": "exact_match"}}),
]


@pytest.mark.parametrize("short, canonical", CASES)
def test_shorthand(short, canonical):
    assert desugar(short) == canonical


@pytest.mark.parametrize("short, canonical", CASES)
def test_canonical_form_is_a_fixed_point(short, canonical):
    assert desugar(canonical) == canonical


@pytest.mark.parametrize("short, canonical", CASES)
def test_input_is_not_modified(short, canonical):
    before = copy.deepcopy(short)
    desugar(short)
    assert short == before


@pytest.mark.parametrize(
    "doc",
    [
        {"state": ["x"]},
        {"inputs": 5},
        {"nodes": ["a"]},
        {"nodes": {"a": 5}},
        {"nodes": {"a": {"next": 5}}},
        {"nodes": {"a": {"prompt": 5}}},
        {"threads": {"t": 5}},
        {"reward": 5},
        {"nodes": {"a": {"prompt": [5]}}},
    ],
)
def test_wrong_types_are_left_for_the_schema_to_report(doc):
    assert desugar(doc) == doc
