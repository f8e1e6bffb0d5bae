"""The simulated policy for Search-R1 and ReTool: a turn is a function of the prompt alone.

Why the prompt alone: slime's own example generate functions (benchmarks.peers) send no session
header and no per-call seed, so whatever the simulated model does must be read off what it is
shown -- as a greedy model's output is. graphrl's compiled graphs and slime's examples render
different prompts around the same question (their own templates, their own observation text), so
only the facts both keep are read:
  which task    Search-R1: the question template's "call a search engine by <search>";
                ReTool: "<code>" instructions (graphrl) or the "code_interpreter" tool (slime)
  which rollout the question's "(case N)" marker (benchmarks.data writes one per row)
  which turn    the observations and corrections already in the prompt after the question
                (closing tags counted: the instructions before it mention the tags too)
Per rollout a seeded plan (how many searches / code runs, a 5% chance per turn of an invalid
turn with neither tag, a 60% chance of the right answer); per turn a seeded variant of the text and
the same non-canonical token split as every other turn of the simulated model.

Stop strings are honoured as SGLang does: when the request's `stop` holds a string the turn
contains, the output ends right after it (finish `stop`, `matched` that string, no `<|im_end|>`);
otherwise the turn ends with `<|im_end|>`. A turn whose action is a tag ends exactly at that tag,
so a request without the stop string (slime's ReTool example sends none) gets the same text
followed by `<|im_end|>`.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from .text import REASONS, gold_answer, seeded, sentence, wrong_answer

SEARCH_R1 = "search_r1"
RETOOL = "retool"
INVALID_RATE = 0.05
CORRECT_RATE = 0.6
MAX_SEARCH_R1_TURNS = 4  # graphs/search_r1.yaml's max_turns (the peer is configured to the same)
_CASE = re.compile(r"([^\n>]*\(case (\d+)\))")
_SEARCH_QUESTION = re.compile(r"Question: (.*?\(case \d+\))")
_RETRY = "Let me try again."


def detect(role: str, head: str) -> str | None:
    """The task of a policy prompt from its first tokens (decoded), or None (another workflow)."""
    if role != "policy":
        return None
    if "call a search engine by <search>" in head:
        return SEARCH_R1
    if "<code>" in head or "code_interpreter" in head:
        return RETOOL
    return None


def retool_gold(question: str) -> str:
    """The answer to a ReTool benchmark question: a function of its text (what the rows' label is)."""
    return str(1000 + zlib.crc32(question.encode()) % 9000)


def _case(prompt_text: str) -> tuple[str, str, str]:
    """(the question line, its case number, the prompt after it: where the turns so far are)."""
    m = _CASE.search(prompt_text)
    return (m.group(1).strip(), m.group(2), prompt_text[m.end() :]) if m else ("", "0", prompt_text)


def _filler(rng, n: int) -> str:
    return " ".join(sentence(rng) for _ in range(n))


def turn_text(kind: str, seed: int, prompt_text: str) -> tuple[tuple, str]:
    """(the turn's variant key, its text) for `kind` given the whole decoded prompt."""
    if kind == SEARCH_R1:
        m = _SEARCH_QUESTION.search(prompt_text)
        question = m.group(1) if m else _case(prompt_text)[0]
        _, case, after = _case(prompt_text)
        done, retries = after.count("</information>"), after.count(_RETRY)
        turn = done + retries
        plan = seeded(seed, "search_r1-plan", case)
        searches = plan.choice((0, 1, 1, 2, 2))
        rng = seeded(seed, "search_r1", case, turn)
        think = f"<think>\n{rng.choice(REASONS)} {_filler(rng, rng.randint(1, 3))}\n</think>\n"
        if turn < MAX_SEARCH_R1_TURNS - 1 and rng.random() < INVALID_RATE:
            return (kind, case, turn, "invalid"), think + "I am not sure yet what to do next."
        if done < searches and turn < MAX_SEARCH_R1_TURNS - 1:
            key = question.split("the ", 1)[-1].split("?", 1)[0]
            return (kind, case, turn, "search"), think + f"<search> {key} </search>"
        ans = gold_answer(question) if rng.random() < CORRECT_RATE else wrong_answer(question, rng)
        return (kind, case, turn, "answer"), think + f"<answer> {ans} </answer>"
    question, case, after = _case(prompt_text)
    done, retries = after.count("</interpreter>"), after.count(_RETRY)
    turn = done + retries
    plan = seeded(seed, "retool-plan", case)
    runs = plan.choice((0, 1, 1, 2, 3))
    rng = seeded(seed, "retool", case, turn)
    reason = f"{rng.choice(REASONS)} {_filler(rng, rng.randint(2, 6))}"
    if rng.random() < INVALID_RATE and turn < 6:
        return (kind, case, turn, "invalid"), reason
    if done < runs:
        code = f"x = {rng.randint(2, 999)} * {rng.randint(2, 999)}\nprint(x, x % 97)"
        return (kind, case, turn, "code"), f"{reason}\n\n<code>\n{code}\n</code>"
    ans = retool_gold(question) if rng.random() < CORRECT_RATE else str(rng.randint(1000, 9999))
    return (kind, case, turn, "answer"), f"{reason}\n\nAnswer: \\boxed{{{ans}}}"


def stop_at(text: str, stop: Any) -> str | None:
    """The stop string the output ends on (the earliest match in `text`), or None."""
    if not stop:
        return None
    stops = [stop] if isinstance(stop, str) else list(stop)
    best: tuple[int, str] | None = None
    for s in stops:
        i = text.find(s) if s else -1
        if i >= 0 and (best is None or i + len(s) < best[0]):
            best = (i + len(s), s)
    return best[1] if best else None


def session_of(key: tuple) -> str:
    """The session a call without a routing header is logged under: the rollout of its case, named
    as benchmarks.sample names the samples of one-sample-per-prompt rows (`s` + row index)."""
    return f"s{int(key[1]):06d}"
