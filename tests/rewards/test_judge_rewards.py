"""exact_match / sub_em with a judge (asked only when the rule says 0), verdict styles, LaTeX stripping."""

from __future__ import annotations

import asyncio

import pytest

from graphrl.rewards.scorer import RewardBox, parse_verdict
from graphrl.rewards.text import exact_match, normalize, strip_latex, sub_em


class Judge:
    def __init__(self, reply: str):
        self.reply, self.asked = reply, []

    async def __call__(self, model, messages, max_tokens):
        self.asked.append((model, messages[-1]["content"], max_tokens))
        return self.reply


def score(fn, args, judge=None, model="judge-model", **box):
    judge = judge or Judge("")
    return asyncio.run(RewardBox(**box).score(fn, args, judge_model=model, judge=judge)), judge


@pytest.mark.parametrize(
    "reply,want",
    [
        ('{"correct": true}', True),
        ('{"correct": false}', False),
        ('```json\n{"correct": true}\n```', True),
        ("It matches.\nVERDICT: True", True),
        ("VERDICT: **False**", False),
        ('VERDICT: False\n{"correct": true}', True),  # the last verdict wins
        ("Correct: true", True),
        ("I cannot tell.", False),
        ("", False),
    ],
)
def test_parse_verdict_both_styles(reply, want):
    assert parse_verdict(reply) is want


@pytest.mark.parametrize("fn", ["exact_match", "sub_em"])
def test_judge_is_not_asked_when_the_rule_matches(fn):
    value, judge = score(fn, {"prediction": "Frank Herbert", "label": "frank herbert"}, Judge('{"correct": false}'))
    assert value == 1.0 and judge.asked == []


@pytest.mark.parametrize("fn", ["exact_match", "sub_em"])
def test_judge_rescues_a_rule_miss(fn):
    args = {
        "prediction": "It was written by F. Herbert",
        "label": ["Frank Herbert", "Herbert, Frank"],
        "question": "Who wrote Dune?",
    }
    value, judge = score(fn, args, Judge('{"correct": true}'), judge_max_tokens=64)
    assert value == 1.0
    ((model, prompt, max_tokens),) = judge.asked
    assert model == "judge-model" and max_tokens == 64
    assert "Who wrote Dune?" in prompt and "F. Herbert" in prompt and "Frank Herbert | Herbert, Frank" in prompt
    value, _ = score(fn, args, Judge("no idea"))
    assert value == 0.0  # no verdict: False


def test_judge_sees_the_extracted_answer_and_nothing_without_one():
    args = {"prediction": r"long reasoning ... \boxed{F. Herbert}", "label": "Frank Herbert", "extract": "boxed"}
    value, judge = score("exact_match", args, Judge('{"correct": true}'))
    assert value == 1.0 and "Predicted answer: F. Herbert\n" in judge.asked[0][1]
    value, judge = score("exact_match", {**args, "prediction": "no box here"}, Judge('{"correct": true}'))
    assert value == 0.0 and judge.asked == []  # a format failure is not the judge's to forgive


def test_without_a_judge_model_the_rule_decides():
    value, judge = score(
        "sub_em", {"prediction": "F. Herbert", "label": "Frank Herbert"}, Judge('{"correct": true}'), model=None
    )
    assert value == 0.0 and judge.asked == []


def test_f1_never_asks_a_judge():
    value, judge = score("f1", {"prediction": "blue", "label": "red"}, Judge('{"correct": true}'))
    assert value == 0.0 and judge.asked == []


def test_latex_is_stripped_before_squad_normalisation():
    assert strip_latex(r"$\text{Frank \textbf{Herbert}}$") == "Frank Herbert"
    assert normalize(r"\(\mathrm{New}\ \text{York}\)") == "new york"
    assert normalize(r"$1{,}000\,\text{km}$") == "1000 km"
    # MemAgent's reward: exact match of the last \boxed{} in the tail, LaTeX presentation ignored
    pred = r"Based on the memory, the answer is \boxed{\text{The Eiffel Tower}}."
    assert exact_match(pred, ["eiffel tower"], extract="boxed", tail_chars=300) == 1.0
    assert sub_em(r"$\textit{Dune}$ by Herbert", "dune") == 1.0
