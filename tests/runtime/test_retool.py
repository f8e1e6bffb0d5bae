"""graphs/retool.yaml with canned policy replies and the real python sandbox: every branch (code then
answer, state kept between code blocks, a failing code block, invalid action, length cut, turn
limit), the recipe's reward, and its token layout (interpreter output inside the one response,
masked, with no chat markers between a policy span and its observation)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted
from graphrl.models.tokenizer import QWEN_TOKEN_IDS

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the python sandbox is Linux")
REPO = Path(__file__).resolve().parents[2]
IM_START, IM_END = QWEN_TOKEN_IDS["<|im_start|>"], QWEN_TOKEN_IDS["<|im_end|>"]
INVALID = "\nMy previous action is invalid."


@pytest.fixture(scope="module")
def plan():
    p, diags = plan_from_path(REPO / "graphs" / "retool.yaml")
    assert p is not None, diags
    return p


def _code(kit, text: str) -> Scripted:
    ids = kit.ids(text, stop=False)
    return Scripted(output_ids=ids, logprobs=(-0.5,) * len(ids), finish_reason=FinishReason("stop", matched="</code>"))


def _run(kit, plan, replies, label="2870"):
    engine = kit.engine(replies)
    row = {"prompt": "What is the sum of the squares of the first 20 positive integers?", "label": label}
    return kit.run(kit.executor(plan, {"policy": engine}), row), engine


def test_code_then_answer_with_state_kept_between_code_blocks(kit, plan):
    res, engine = _run(
        kit,
        plan,
        [
            _code(kit, "Let me compute.\n<code>\nsquares = [i * i for i in range(1, 21)]\n</code>"),
            _code(kit, "Now the sum.\n<code>\nprint(sum(squares))\n</code>"),
            "The sum is 2870.\nAnswer: \\boxed{2870}",
        ],
    )
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["reason", "run", "reason", "run", "reason"]
    assert res.reward == {"score": 1.0, "acc": 1.0, "pred": "2870", "tool_calls": 2}
    (s,) = res.samples
    assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [
        ("reason", "generated", 1),
        ("run", "observation", 0),
        ("reason", "generated", 1),
        ("run", "observation", 0),
        ("reason", "generated", 1),
    ]
    first_obs = kit.r.decode(s.response_ids[s.spans[1].start : s.spans[1].end])
    second_obs = kit.r.decode(s.response_ids[s.spans[3].start : s.spans[3].end])
    assert first_obs == "\n\n<interpreter>\n\n</interpreter>\n\n"  # the first block prints nothing
    assert second_obs == "\n\n<interpreter>\n2870\n</interpreter>\n\n"  # `squares` survived: one session
    ids = s.response_ids[: s.spans[4].start]  # everything before the final answer: no chat markers
    assert IM_START not in ids and IM_END not in ids
    for i, req in enumerate(engine.requests):  # the engine continues from exactly the ids trained on
        assert req.input_ids == s.tokens[: len(req.input_ids)], i


def test_a_failing_code_block_is_shown_and_the_policy_goes_on(kit, plan):
    res, _ = _run(
        kit,
        plan,
        [_code(kit, "<code>\nprint(1 / 0)\n</code>"), "Oops.\nAnswer: \\boxed{2870}"],
    )
    assert res.status == "completed" and res.reward["score"] == 1.0
    obs = kit.r.decode(res.samples[0].response_ids[res.samples[0].spans[1].start : res.samples[0].spans[1].end])
    assert "ZeroDivisionError" in obs and obs.startswith("\n\n<interpreter>\nTraceback")


def test_invalid_action_gets_the_correction_inside_the_response(kit, plan):
    res, _ = _run(kit, plan, ["I think it is about 3000.", "Answer: \\boxed{2870}"])
    assert [n for n, _ in res.path] == ["reason", "invalid", "reason"] and res.reward["score"] == 1.0
    text = kit.r.decode(res.samples[0].response_ids)
    assert INVALID in text and "'Answer: \\boxed{answer}'" in text


def test_a_length_cut_ends_the_rollout_truncated(kit, plan):
    cut = kit.ids("Let me think " * 5, stop=False)
    res, engine = _run(
        kit,
        plan,
        [Scripted(output_ids=cut, logprobs=(-0.5,) * len(cut), finish_reason=FinishReason("length", matched=len(cut)))],
    )
    assert res.status == "truncated" and len(engine.requests) == 1 and res.reward["score"] == pytest.approx(-1.1)


def test_at_most_max_turns_policy_calls_and_the_tool_nudge(kit, plan):
    res, engine = _run(kit, plan, [_code(kit, "<code>\nprint(1)\n</code>")] * 20)
    assert len(engine.requests) == plan.constants["max_turns"] == 8
    # no answer: -1 raised by 0.05 per call beyond two, capped at -0.6 (8 calls: -0.7)
    assert res.reward == {"score": pytest.approx(-0.7), "acc": 0.0, "pred": "", "tool_calls": 8}


def test_a_wrong_answer_without_tools_is_minus_one(kit, plan):
    res, _ = _run(kit, plan, ["Answer: \\boxed{2871}"])
    assert res.reward == {"score": pytest.approx(-1.1), "acc": 0.0, "pred": "2871", "tool_calls": 0}
