"""Parsers: model output text -> fields, never evaluated; failures are data (ok False), not exceptions."""

from __future__ import annotations

import builtins

import pytest

from graphrl.runtime.parsers import last_boxed, parse_output, python_call
from graphrl.spec.model import Parse


def parse(text: str, **spec):
    return parse_output(Parse.model_validate(spec), text)


# ---------------------------------------------------------------- boxed


def test_boxed_counts_nested_braces_and_the_last_one_wins():
    text = r"first \boxed{1} then \boxed{\frac{1}{2}} finally \boxed{x^{2} + {y}_{1}} done"
    assert last_boxed(text) == r"x^{2} + {y}_{1}"
    res = parse(text, boxed="ans")
    assert res.ok and res.fields == {"ans": r"x^{2} + {y}_{1}"}


def test_fbox_and_spacing_after_boxed():
    assert last_boxed(r"\fbox{a}") == "a"
    assert last_boxed(r"\boxed {7}") == "7"


def test_unclosed_boxed_is_no_answer():
    res = parse(r"The answer is \boxed{\frac{1}{2}", boxed="ans")
    assert not res.ok and res.fields == {"ans": None} and "boxed" in res.error
    # a cut-off last \boxed{ is not replaced by an earlier, superseded one
    assert last_boxed(r"\boxed{1}, no wait: \boxed{2") is None
    assert last_boxed("no box at all") is None


# ---------------------------------------------------------------- tags / fields / regex


def test_tags_take_the_last_match_stripped_and_every_tag_must_match():
    res = parse("<answer>first</answer> <answer>\n second \n</answer>", tags=["answer"])
    assert res.ok and res.fields == {"answer": "second"}
    res = parse("<answer>a</answer>", tags=["answer", "query"])
    assert not res.ok and res.fields == {"answer": "a", "query": None} and "<query>" in res.error


AGENTFLOW_STEP = """<think>
Context: a draft context
Sub-Goal: a draft goal
Tool Name: base_generator
</think>
Here is the next step.

**Context:** The question asks for 2^10 - 1.
The earlier step found nothing.
**Sub-Goal:** Compute 2^10 - 1 exactly.
**Tool Name:** python_coder
"""


def test_fields_agentflow_block_with_markdown_and_think():
    res = parse(AGENTFLOW_STEP, strip_think=True, strip_markdown=True, fields=["Context", "Sub-Goal", "Tool Name"])
    assert res.ok
    assert res.fields == {
        "context": "The question asks for 2^10 - 1.\nThe earlier step found nothing.",
        "sub_goal": "Compute 2^10 - 1 exactly.",
        "tool_name": "python_coder",  # not the draft inside <think>, no ** left over
    }


def test_fields_without_strip_think_take_the_last_occurrence_and_keep_markup():
    res = parse(AGENTFLOW_STEP, fields=["Tool Name"])
    assert res.fields["tool_name"] == "** python_coder"  # last occurrence, markup not stripped
    res = parse("Tool Name: a\nContext: c\nTool Name: b\n", fields=["Tool Name", "Context"])
    assert res.fields == {"tool_name": "b", "context": "c"}


def test_fields_missing_one_is_a_failure_and_the_field_exists_as_default_or_none():
    res = parse("Context: x", fields=["Context", "Sub-Goal"])
    assert not res.ok and res.fields == {"context": "x", "sub_goal": None} and "Sub-Goal" in res.error
    res = parse("nothing", fields=["Conclusion"], default={"conclusion": "CONTINUE"})
    assert not res.ok and res.fields == {"conclusion": "CONTINUE"}
    res = parse("**Conclusion:** STOP", strip_markdown=True, fields=["Conclusion"], default={"conclusion": "CONTINUE"})
    assert res.ok and res.fields == {"conclusion": "STOP"}


def test_regex_group_one_or_whole_match_of_the_last_match():
    res = parse("n=1 w2 n=33 w4", regex={"n": r"n=(\d+)", "w": r"w\d"})
    assert res.ok and res.fields == {"n": "33", "w": "w4"}
    res = parse("x", regex={"n": r"n=(\d+)"})
    assert not res.ok and res.fields == {"n": None}


# ---------------------------------------------------------------- json / tool calls / code


def test_json_whole_text_or_first_value_inside():
    assert parse("[1, 2]", json="j").fields == {"j": [1, 2]}
    res = parse('Sure: {"a": [1, {"b": 2}]} and then {"c": 3}', json="j")
    assert res.ok and res.fields == {"j": {"a": [1, {"b": 2}]}}
    res = parse("{not json", json="j")
    assert not res.ok and res.fields == {"j": None}


def test_tool_calls_several_per_turn_in_order():
    text = (
        '<think>route</think>\n<tool_call>\n{"name": "search", "arguments": {"model": "expert-1"}}\n'
        '</tool_call>\n<tool_call>{"name": "answer", "arguments": "{\\"model\\": \\"expert-2\\"}"}</tool_call>'
    )
    res = parse(text, strip_think=True, tool_calls="calls")
    assert res.ok
    assert res.fields == {
        "calls": [
            {"name": "search", "arguments": {"model": "expert-1"}},
            {"name": "answer", "arguments": {"model": "expert-2"}},
        ]
    }


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "search", "arguments": {"model": }}</tool_call>',  # invalid JSON
        '<tool_call>{"name": "a"}</tool_call><tool_call>{bad</tool_call>',  # one good, one bad
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',  # arguments not an object
        "I will answer directly: 42",  # no call at all
    ],
)
def test_tool_calls_invalid_is_ok_false(text):
    res = parse(text, tool_calls="calls")
    assert not res.ok and res.fields == {"calls": None} and res.error


def test_code_takes_the_first_fenced_block():
    res = parse("Plan:\n```python\nprint(1)\n```\nor\n```\nprint(2)\n```", code="code")
    assert res.ok and res.fields == {"code": "print(1)\n"}
    assert not parse("print(1)", code="code").ok


# ---------------------------------------------------------------- call: parsed, never executed


def test_call_parses_the_executor_command():
    text = 'Command:\n```python\nexecution = tool.execute(query="Compute 2**10 - 1 and print it")\n```'
    res = parse(text, call="command")
    assert res.ok
    assert res.fields["command"] == {
        "func": "tool.execute",
        "args": {"query": "Compute 2**10 - 1 and print it"},
        "positional": [],
    }
    assert python_call('tool.execute("a", 2, flag=True)') == {
        "func": "tool.execute",
        "args": {"flag": True},
        "positional": ["a", 2],
    }


@pytest.mark.parametrize(
    "arg",
    [
        "__import__('os').system('touch {marker}')",
        "open('{marker}', 'w').write('x')",
        "(lambda: __import__('os').system('touch {marker}'))()",
        "f\"{{__import__('os').system('touch {marker}')}}\"",
        "'a' * 10**9",
    ],
)
def test_call_rejects_non_literal_arguments_and_runs_nothing(tmp_path, monkeypatch, arg):
    marker = tmp_path / "pwned"
    calls = []
    for name in ("eval", "exec", "__import__", "open"):
        real = getattr(builtins, name)

        def spy(*a, _real=real, _name=name, **k):
            if any(str(marker) in str(x) for x in a):
                calls.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(builtins, name, spy)
    text = "```python\nexecution = tool.execute(query=" + arg.format(marker=marker) + ")\n```"
    res = parse(text, call="command")
    monkeypatch.undo()
    assert not res.ok and res.fields == {"command": None}
    assert not marker.exists() and calls == []


# ---------------------------------------------------------------- fallback, default, declared fields


def test_fallback_is_tried_on_the_original_text_and_defaults_fill_the_rest():
    spec = dict(
        strip_think=True,
        tags=["answer"],
        fallback={"strip_think": True, "boxed": "answer"},
        default={"answer": "none", "extra": 5},
    )
    res = parse("<answer>Paris</answer>", **spec)
    assert res.ok and res.fields == {"answer": "Paris", "extra": 5}
    res = parse(r"<think>\boxed{1}</think>so \boxed{Paris}", **spec)
    assert res.ok and res.fields == {"answer": "Paris", "extra": 5}
    res = parse("no answer at all", **spec)
    assert not res.ok and res.fields == {"answer": "none", "extra": 5} and "<answer>" in res.error


def test_every_declared_field_exists_as_none_when_not_found():
    res = parse(
        "nothing",
        tags=["a"],
        boxed="b",
        regex={"c": "x(y)"},
        json="d",
        code="e",
        fallback={"tool_calls": "f", "call": "g"},
    )
    assert not res.ok
    assert res.fields == {k: None for k in "abcdefg"}


def test_no_parse_block_is_ok_with_no_fields():
    res = parse_output(None, "anything")
    assert res.ok and res.fields == {}


def test_strip_think_keeps_only_text_after_the_last_think_end():
    res = parse("<think>a</think> mid <think>b</think> <answer>x</answer>", strip_think=True, tags=["answer"])
    assert res.ok and res.fields == {"answer": "x"}
    res = parse("<think><answer>hidden</answer></think> visible", strip_think=True, tags=["answer"])
    assert not res.ok and res.fields == {"answer": None}
