"""ScriptedEngineForTests: replays ids/texts/Generations/callables and records requests."""

from __future__ import annotations

import asyncio

import pytest

from graphrl.engines.base import Engine, EngineError, FinishReason, Generation
from graphrl.engines.scripted import Scripted, ScriptedEngineForTests


class CharTokenizer:
    """One id per character: enough to test text outputs without a real tokenizer."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


def run(coro):
    return asyncio.run(coro)


def test_replays_in_order_and_records_requests():
    ready = Generation((9,), (-0.5,), FinishReason("abort", message="x"))
    eng = ScriptedEngineForTests(
        [[1, 2, 3], Scripted(output_ids=(4, 5), logprobs=(-0.1, -0.2), cached_tokens=2), ready]
    )
    assert isinstance(eng, Engine)

    async def main():
        a = await eng.generate([10, 11], {"max_new_tokens": 8}, session_id="s")
        b = await eng.generate((12,), {}, rid="r")
        c = await eng.generate([13], {})
        with pytest.raises(EngineError, match="no scripted output for call 3"):
            await eng.generate([14], {})
        return a, b, c

    a, b, c = run(main())
    assert a.output_ids == (1, 2, 3) and a.logprobs == (-1.0, -1.0, -1.0)
    assert a.finish_reason == FinishReason("stop", matched=3) and a.prompt_tokens == 2
    assert b.logprobs == (-0.1, -0.2) and b.cached_tokens == 2
    assert c is ready
    assert [r.input_ids for r in eng.requests] == [(10, 11), (12,), (13,), (14,)]
    assert eng.requests[0].session_id == "s" and eng.requests[1].rid == "r"
    assert eng.requests[0].sampling_params == {"max_new_tokens": 8}


def test_text_outputs_need_a_tokenizer_and_cut_at_max_new_tokens():
    eng = ScriptedEngineForTests(
        ["hello", Scripted(text="ok", finish_reason=FinishReason("stop", matched="</a>"))], tokenizer=CharTokenizer()
    )
    cut = run(eng.generate([1], {"max_new_tokens": 3}))
    assert cut.output_ids == tuple(map(ord, "hel")) and cut.text == "hel"
    assert cut.finish_reason == FinishReason("length", matched=3)
    ok = run(eng.generate([1], {}))
    assert ok.text == "ok" and ok.finish_reason.matched == "</a>"
    with pytest.raises(EngineError, match="tokenizer"):
        run(ScriptedEngineForTests(["x"]).generate([1], {}))


def test_callable_script_sees_ids_params_and_index():
    seen = []

    def script(ids, params, index):
        seen.append((ids, params.get("temperature"), index))
        return [index + 100]

    eng = ScriptedEngineForTests(script)
    outs = [run(eng.generate([7], {"temperature": 0.5})).output_ids for _ in range(2)]
    assert outs == [(100,), (101,)] and seen == [((7,), 0.5, 0), ((7,), 0.5, 1)]


def test_validation_and_close():
    with pytest.raises(ValueError):
        Scripted()
    with pytest.raises(ValueError):
        Scripted(output_ids=(1,), text="x")
    eng = ScriptedEngineForTests([Scripted(output_ids=(1, 2), logprobs=(0.0,))])
    with pytest.raises(ValueError, match="log-probs"):
        run(eng.generate([1], {}))
    run(eng.close())
    with pytest.raises(EngineError, match="closed"):
        run(eng.generate([1], {}))
