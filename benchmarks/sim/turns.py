"""The simulated model: (endpoint role, session, call number, prompt ids) -> one agent turn.

Input: a Hugging Face fast tokenizer (the policy's), a seed, a `Shape` (length distributions and
branch rates). Per call: "policy" or "expert", the session id (slime's routing key), the number of
earlier calls of that session on this endpoint, the prompt ids, max_new_tokens.
Output: a `Turn`: output ids (+ the stop id `<|im_end|>` unless cut by max_new_tokens), one
log-prob per id, SGLang's finish_reason, the decoded text.

What the outputs look like is read off the prompt (the graphs' prompt wording), so every branch of
both workflows is exercised:
  policy  memorize  a memory update (sometimes empty: the graph keeps the old memory)
          answer    a short answer with \\boxed{} (right or wrong)
          orchestrate  <think>..</think> then <tool_call>{"name", "arguments": {"model": alias}}
                    </tool_call>; per session a plan of 1-5 tools then `answer`, sometimes 14 tools
                    (the graph's 12-turn limit), sometimes an invalid call (bad JSON / unknown alias)
  expert  query / reason (sometimes with a ```python block) / consult / final (<answer> or \\boxed{})
          / judge ({"correct": true|false}; a function of the prompt alone, whatever the session)

Cheap to serve: each kind has `POOL` variants (their lengths drawn from `Shape`), tokenised once and
cached; a call picks a variant and the discrete choices (tool, alias, answer, verdict) by its seed.
Invariants: deterministic in (seed, role, session, call number, prompt kind); text is tokenised
canonically, except that a `noncanonical_rate` share of turns has one token split into two valid
tokens that decode to the same text -- as sampled models sometimes do, and exactly what a
decode/re-encode round trip silently changes.
"""

from __future__ import annotations

import json
import math
import random
import re
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import agents
from .text import ALIASES, REASONS, gold_answer, seeded, sentence, wrong_answer

IM_END = 151645
POOL = 512  # output variants per kind; a call picks one (and its own non-canonical split, log-probs)
_SPECIAL_FROM = 151643  # ids from here on are added tokens: never split


@dataclass(frozen=True)
class Shape:
    """Output lengths (median tokens, log-normal sigma) and branch rates of the simulated model."""

    memory: tuple[float, float] = (160.0, 0.7)
    answer: tuple[float, float] = (30.0, 0.4)
    think: tuple[float, float] = (45.0, 0.5)
    query: tuple[float, float] = (14.0, 0.3)
    reason: tuple[float, float] = (160.0, 0.5)
    consult: tuple[float, float] = (200.0, 0.5)
    noncanonical_rate: float = 0.05
    empty_memory_rate: float = 0.03
    invalid_call_rate: float = 0.03
    long_plan_rate: float = 0.03
    code_rate: float = 0.35
    correct_rate: float = 0.6
    boxed_fallback_rate: float = 0.1
    judge_true_rate: float = 0.3


@dataclass(frozen=True)
class Turn:
    kind: str
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish: dict[str, Any]
    text: str
    session: str | None = None  # Search-R1 / ReTool: the rollout read off the prompt (agents.session_of)


def digest(ids: Sequence[int]) -> int:
    return zlib.crc32(array("i", ids).tobytes())


def _length(rng: random.Random, spec: tuple[float, float]) -> int:
    median, sigma = spec
    return max(4, int(rng.lognormvariate(math.log(median), sigma)))


def _filler(rng: random.Random, tokens: int) -> str:
    return " ".join(sentence(rng) for _ in range(max(1, round(tokens / 19))))


class TurnWriter:
    def __init__(self, tokenizer: Any, seed: int = 0, shape: Shape | None = None):
        self.seed = seed
        self.shape = shape or Shape()
        self._tok = tokenizer.backend_tokenizer
        self._vocab = self._tok.get_vocab(with_added_tokens=False)
        self._pieces = {i: t for t, i in self._vocab.items()}
        self._cache: dict[tuple, tuple[tuple[int, ...], str]] = {}  # variant key -> (ids, text)

    # -- text <-> ids ----------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    # -- the model -------------------------------------------------------------------------------
    def classify(self, role: str, prompt: Sequence[int]) -> str:
        tail = self.decode(prompt[-48:])
        if role == "policy":
            if "Updated memory:" in tail:
                return "memorize"
            if "\\boxed{1987}" in tail:
                return "answer"
            return agents.detect(role, self.decode(prompt[:160])) or "orchestrate"
        for marker, kind in (
            ("<query></query>", "query"),
            ("output reported", "reason"),
            ("answer clearly", "consult"),
            ("</answer>", "final"),
            ("JSON only", "judge"),
        ):
            if marker in tail:
                return kind
        return "other"

    def write(self, role: str, session: str, call: int, prompt: Sequence[int], max_new: int, stop: Any = None) -> Turn:
        kind = self.classify(role, prompt)
        if kind in (agents.SEARCH_R1, agents.RETOOL):
            return self._agent_turn(kind, prompt, max_new, stop)
        # a judge's verdict is a function of what it is shown (some graders send no session id)
        rng = (
            seeded(self.seed, "judge", digest(prompt))
            if kind == "judge"
            else seeded(self.seed, role, session, call, kind)
        )
        key = getattr(self, "_" + kind)(rng, session, call, prompt)
        cached = self._cache.get(key)
        if cached is None:
            text = self._text(key)
            cached = self._cache[key] = (tuple(self.encode(text)), text)
        ids, text = list(cached[0]), cached[1]
        if rng.random() < self.shape.noncanonical_rate:
            ids = self._split_one(ids, rng)  # same text, other ids
        if len(ids) >= max_new:
            ids = ids[:max_new]
            finish: dict[str, Any] = {"type": "length", "length": max_new}
            text = self.decode(ids)
        else:
            ids.append(IM_END)
            finish = {"type": "stop", "matched": IM_END}
            text += "<|im_end|>"
        rnd = rng.random
        logprobs = tuple(-3.0 * rnd() ** 3 for _ in ids)
        return Turn(kind, tuple(ids), logprobs, finish, text)

    def _agent_turn(self, kind: str, prompt: Sequence[int], max_new: int, stop: Any) -> Turn:
        """Search-R1 / ReTool (benchmarks.sim.agents): the turn is read off the whole prompt."""
        key, text = agents.turn_text(kind, self.seed, self.decode(prompt))
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = (tuple(self.encode(text)), text)
        ids = list(cached[0])
        rng = seeded(self.seed, "turn", *key)
        if rng.random() < self.shape.noncanonical_rate:
            ids = self._split_one(ids, rng)
        matched = agents.stop_at(text, stop)
        if len(ids) >= max_new:
            ids = ids[:max_new]
            finish: dict[str, Any] = {"type": "length", "length": max_new}
            text = self.decode(ids)
        elif matched is not None:
            finish = {"type": "stop", "matched": matched}
        else:
            ids.append(IM_END)
            finish = {"type": "stop", "matched": IM_END}
            text += "<|im_end|>"
        rnd = rng.random
        logprobs = tuple(-3.0 * rnd() ** 3 for _ in ids)
        return Turn(kind, tuple(ids), logprobs, finish, text, session=agents.session_of(key))

    def _text(self, key: tuple) -> str:
        """The text of one output variant: a pure function of its key (kind, variant, choices)."""
        kind, variant, *choice = key
        rng = seeded(self.seed, "text", *key)
        shape = self.shape
        if kind == "memorize":
            return "Notes so far: " + _filler(rng, _length(rng, shape.memory)) if variant >= 0 else ""
        if kind == "answer":
            return f"{rng.choice(REASONS)} {_filler(rng, _length(rng, shape.answer))} \\boxed{{{choice[0]}}}"
        if kind == "orchestrate":
            think = f"{rng.choice(REASONS)} {_filler(rng, _length(rng, shape.think))}"
            return f"<think>\n{think}\n</think>\n\n<tool_call>\n{choice[0]}\n</tool_call>"
        if kind == "query":
            words = sentence(rng).rstrip(".").split()[1:]
            return f"<think>\n{rng.choice(REASONS)}\n</think>\n<query>{' '.join(words[: _length(rng, shape.query)])}</query>"
        if kind == "reason":
            text = f"<think>\n{rng.choice(REASONS)}\n</think>\n{_filler(rng, _length(rng, shape.reason))}"
            if choice[0]:
                text += f"\n\n```python\nprint({rng.randint(2, 999)} * {rng.randint(2, 999)})\n```"
            return text
        if kind == "consult":
            return _filler(rng, _length(rng, shape.consult))
        if kind == "final":
            ans, boxed = choice
            if boxed:
                return f"{rng.choice(REASONS)} So the answer is \\boxed{{{ans}}}."
            return f"<think>\n{rng.choice(REASONS)}\n</think>\n<answer>{ans}</answer>"
        if kind == "judge":
            return f'{rng.choice(REASONS)}\n{{"correct": {choice[0]}}}'
        return _filler(rng, 40)

    def _question(self, prompt: Sequence[int], pattern: str) -> str:
        m = re.search(pattern, self.decode(prompt[:256]), re.S)  # the question sits near the start
        return m.group(1) if m else ""

    def _split_one(self, ids: list[int], rng: random.Random) -> list[int]:
        """Replace one multi-byte token by two vocabulary tokens with the same bytes."""
        for _ in range(32):
            i = rng.randrange(len(ids)) if ids else 0
            if not ids or ids[i] >= _SPECIAL_FROM:
                continue
            piece = self._pieces.get(ids[i], "")
            if len(piece) < 2:
                continue
            cut = rng.randrange(1, len(piece))
            a, b = self._vocab.get(piece[:cut]), self._vocab.get(piece[cut:])
            if a is not None and b is not None:
                return ids[:i] + [a, b] + ids[i + 1 :]
        return ids

    # -- turns: each returns the key of its output variant (rng: this call's choices) -------------
    def _memorize(self, rng, session, call, prompt) -> tuple:
        return ("memorize", -1 if rng.random() < self.shape.empty_memory_rate else rng.randrange(POOL))

    def _answer(self, rng, session, call, prompt) -> tuple:
        q = self._question(prompt, r"<problem>\n(.*?)\n</problem>")
        ans = gold_answer(q) if rng.random() < self.shape.correct_rate else wrong_answer(q, rng)
        return ("answer", rng.randrange(POOL), ans)

    def _orchestrate(self, rng, session, call, prompt) -> tuple:
        plan = seeded(self.seed, "plan", session)
        n_tools = 14 if plan.random() < self.shape.long_plan_rate else plan.choice((1, 2, 2, 3, 3, 4, 5))
        tools = [plan.choice(("search", "search", "enhance_reasoning", "call_expert")) for _ in range(n_tools)]
        name = tools[call] if call < n_tools else "answer"
        alias = plan.choice(ALIASES) if name == "answer" else rng.choice(ALIASES)
        body = json.dumps({"name": name, "arguments": {"model": alias}})
        if rng.random() < self.shape.invalid_call_rate:
            body = body[:-1] if rng.random() < 0.5 else body.replace(alias, "expert-9")
        return ("orchestrate", rng.randrange(POOL), body)

    def _query(self, rng, session, call, prompt) -> tuple:
        return ("query", rng.randrange(POOL))

    def _reason(self, rng, session, call, prompt) -> tuple:
        return ("reason", rng.randrange(POOL), rng.random() < self.shape.code_rate)

    def _consult(self, rng, session, call, prompt) -> tuple:
        return ("consult", rng.randrange(POOL))

    def _final(self, rng, session, call, prompt) -> tuple:
        q = self._question(prompt, r"Question:\n(.*?)\n\nInformation gathered")
        ans = gold_answer(q) if rng.random() < self.shape.correct_rate else wrong_answer(q, rng)
        return ("final", rng.randrange(POOL), ans, rng.random() < self.shape.boxed_fallback_rate)

    def _judge(self, rng, session, call, prompt) -> tuple:
        return ("judge", rng.randrange(POOL), "true" if rng.random() < self.shape.judge_true_rate else "false")

    def _other(self, rng, session, call, prompt) -> tuple:
        return ("other", rng.randrange(POOL))
