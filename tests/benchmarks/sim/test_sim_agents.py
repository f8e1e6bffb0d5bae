"""The simulated Search-R1 / ReTool policy (benchmarks.sim.agents): a turn is a function of the
prompt, turns are counted after the question only, and SGLang's stop strings are honoured."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from benchmarks.sim import agents
from benchmarks.sim.turns import IM_END, Shape, TurnWriter

SYSTEM = "Write code between <code> and </code>; its output comes between <interpreter> and </interpreter>."
QUESTION = "Compute the ledger checksum of Jarrow for the year 1811. (case 7)"


def _prompt(*observations: str) -> str:
    return f"{SYSTEM}\n{QUESTION}\n" + "".join(f"step <interpreter>\n{o}\n</interpreter>\n" for o in observations)


def test_turns_are_counted_after_the_question():
    key0, text0 = agents.turn_text(agents.RETOOL, 0, _prompt())
    assert key0[:3] == ("retool", "7", 0)  # the instructions' </interpreter> is not a turn
    key2, _ = agents.turn_text(agents.RETOOL, 0, _prompt("1", "2"))
    assert key2[2] == 2
    assert agents.turn_text(agents.RETOOL, 0, "other words\n" + _prompt()) == (key0, text0)  # the prompt's facts only


def test_retool_gold_is_what_a_right_answer_says():
    texts = [agents.turn_text(agents.RETOOL, s, _prompt("1", "2", "3"))[1] for s in range(40)]
    answers = [t.split("\\boxed{")[1].rstrip("}") for t in texts if "\\boxed{" in t]
    assert agents.retool_gold(QUESTION) in answers  # right in some seeds (60%) ...
    assert any(a != agents.retool_gold(QUESTION) for a in answers)  # ... wrong in others


def test_stop_at_picks_the_earliest_match():
    assert agents.stop_at("a </search> b </answer>", ["</answer>", "</search>"]) == "</search>"
    assert agents.stop_at("a </code>", "</code>") == "</code>"
    assert agents.stop_at("a </code>", None) is None and agents.stop_at("no tag", ["</code>"]) is None


@pytest.fixture(scope="module")
def writer():
    qwen = pytest.importorskip("graphrl.models.tokenizer")
    return TurnWriter(qwen.qwen_tokenizer(), 0, Shape(noncanonical_rate=0.0))


def test_a_stop_string_ends_the_turn_without_im_end(writer):
    prompt = writer.encode(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n")
    seed = next(s for s in range(50) if agents.turn_text(agents.RETOOL, s, writer.decode(prompt))[0][3] == "code")
    writer.seed = seed
    stopped = writer.write("policy", "x", 0, prompt, 1024, ["</code>"])
    free = writer.write("policy", "y", 3, prompt, 1024, None)
    assert stopped.kind == free.kind == agents.RETOOL
    assert stopped.finish == {"type": "stop", "matched": "</code>"} and stopped.ids[-1] != IM_END
    assert free.finish == {"type": "stop", "matched": IM_END} and free.ids == stopped.ids + (IM_END,)
    assert stopped.session == free.session == "s000007"  # logged under its case, whatever the header
