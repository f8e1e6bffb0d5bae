"""Math rewards: normalisation, numeric equivalence, and math_equal's judge fallback (RewardBox)."""

from __future__ import annotations

import asyncio

import pytest

from graphrl.rewards.math import math_equivalent, normalize_math
from graphrl.rewards.scorer import RewardBox, parse_verdict


@pytest.mark.parametrize(
    "a,b",
    [
        ("1/2", "0.5"),
        (r"\frac{1}{2}", "0.5"),
        (r"\frac12", "1/2"),
        (r"\dfrac{1}{2}", r"\tfrac{1}{2}"),
        ("0.50", r"\frac{1}{2}"),
        ("1,000", "1000"),
        ("1,000,000.5", "1000000.5"),
        ("3.0", "3"),
        (r"-\frac{3}{4}", "-0.75"),
        (r"\frac{-1}{2}", "-1/2"),
        ("x = 5", "5"),
        (r"\boxed{5}", "5"),
        ("5.", "5"),
        (r"90^\circ", "90"),
        (r"\$5", "5"),
        (r"\left(1,2\right)", "(1, 2)"),
        (r"\text{5 cm}", "5 cm"),
        (r"50\%", "0.5"),
        (r"50\%", "50"),
        ("0.5%", "0.005"),
    ],
)
def test_equivalent(a, b):
    assert math_equivalent(a, b) and math_equivalent(b, a)


@pytest.mark.parametrize(
    "a,b",
    [
        ("2", "3"),
        ("1,2", "12"),
        ("", "0"),
        ("1/0", "0"),
        ("0.33", "1/3"),
        ("50%", "5"),
        (r"\frac{1}{2}", "2"),
        ("x + 1", "x+2"),
    ],
)
def test_not_equivalent(a, b):
    assert not math_equivalent(a, b)


def test_normalize_math_takes_the_boxed_content():
    assert normalize_math(r"so the answer is \boxed{\dfrac{1}{2}}.") == r"\frac{1}{2}"


@pytest.mark.parametrize(
    "reply,want",
    [
        ("They agree.\nVERDICT: True", True),
        ("VERDICT: true", True),
        ("VERDICT: **True**", True),
        ("At first VERDICT: True, but no.\nVERDICT: False", False),  # the last verdict counts
        ("They agree.", False),  # no verdict: the default, False
        ("VERDICT: maybe", False),
    ],
)
def test_parse_verdict(reply, want):
    assert parse_verdict(reply) is want
    assert parse_verdict("no verdict", default=True) is True


class FakeJudgeForTests:
    def __init__(self, reply):
        self.reply = reply
        self.calls = []

    async def __call__(self, model, messages, max_tokens):
        self.calls.append((model, messages, max_tokens))
        return self.reply


def score(fn, args, judge, judge_model="judge-model"):
    return asyncio.run(RewardBox().score(fn, args, judge_model=judge_model, judge=judge))


def test_math_equal_exact_needs_no_judge():
    judge = FakeJudgeForTests("VERDICT: False")
    got = score("math_equal", {"prediction": r"Thus \boxed{\frac{1}{2}}.", "label": "0.5", "question": "q"}, judge)
    assert got == {"score": 1.0, "acc": 1.0, "pred": r"\frac{1}{2}", "gt": "0.5"}
    assert judge.calls == []


def test_math_equal_falls_back_to_the_judge():
    judge = FakeJudgeForTests("Both are 1023.\nVERDICT: True")
    got = score(
        "math_equal", {"prediction": r"\boxed{2^{10}-1}", "label": "1023", "question": "What is 2^10-1?"}, judge
    )
    assert got["score"] == 1.0 and got["acc"] == 1.0 and got["pred"] == "2^{10}-1"
    ((model, messages, _),) = judge.calls
    assert model == "judge-model"
    assert "2^{10}-1" in messages[0]["content"] and "1023" in messages[0]["content"]
    assert "What is 2^10-1?" in messages[0]["content"]


@pytest.mark.parametrize("reply", ["VERDICT: False", "I am not sure."])
def test_math_equal_judge_no_or_unparsable_is_zero(reply):
    judge = FakeJudgeForTests(reply)
    got = score("math_equal", {"prediction": r"\boxed{7}", "label": "1023"}, judge)
    assert got["score"] == 0.0 and len(judge.calls) == 1


def test_math_equal_without_judge_model_or_prediction_never_asks():
    judge = FakeJudgeForTests("VERDICT: True")
    assert score("math_equal", {"prediction": r"\boxed{7}", "label": "8"}, judge, judge_model=None)["score"] == 0.0
    assert score("math_equal", {"prediction": r"\boxed{}", "label": "8"}, judge)["score"] == 0.0
    assert judge.calls == []


def test_judge_reward_and_text_rewards_through_the_box():
    judge = FakeJudgeForTests("VERDICT: True")
    assert (
        score("judge", {"question": "q", "prediction": "p", "label": "l", "instructions": "Be strict."}, judge) == 1.0
    )
    assert judge.calls[0][1][0]["content"].startswith("Be strict.")
    assert score("exact_match", {"prediction": "Paris", "label": ["paris"]}, judge) == 1.0
    assert score("sub_em", {"prediction": "in Paris", "label": "paris"}, judge) == 1.0


def test_user_reward_functions_sync_and_async(tmp_path, monkeypatch):
    (tmp_path / "user_rewards_box.py").write_text(
        "import asyncio\n"
        "def sync_score(prediction):\n    return {'score': len(prediction), 'ok': True}\n"
        "async def async_score(prediction):\n    await asyncio.sleep(0)\n    return 0.25\n"
    )
    box = RewardBox([tmp_path])
    run = lambda fn: asyncio.run(box.score(fn, {"prediction": "abc"}, judge_model=None, judge=FakeJudgeForTests("")))
    assert run("user_rewards_box:sync_score") == {"score": 3, "ok": True}
    assert run("user_rewards_box:async_score") == 0.25
    with pytest.raises(ValueError, match="no attribute 'nope'"):
        run("user_rewards_box:nope")
