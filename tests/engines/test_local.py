"""LocalEngine on the tiny Qwen2: finish reasons, stop ids/strings, seeds, log-probs checked against
a full forward pass, the KV prefix cache, abort/cancel, bad requests, and the async protocol."""

from __future__ import annotations

import asyncio
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphrl.engines.base import Engine, EngineError, FinishReason
from graphrl.engines.local import LocalEngine
from graphrl.models.registry import load_model


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny")


@pytest.fixture()
def engine(tiny):
    eng = LocalEngine(*tiny, device="cpu", seed=0)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(scope="module")
def prompt(tiny):
    _, tok = tiny
    return tok.encode("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")


GREEDY = {"temperature": 0.0, "ignore_eos": True}


def reference_logprobs(model, prompt, output, temperature=1.0):
    """Log-probs of `output` under one full forward pass over prompt + output (no KV cache)."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(prompt) + list(output)])).logits[0].float()
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(output)] / temperature
    return torch.log_softmax(rows, -1)[torch.arange(len(output)), torch.tensor(output)].tolist()


def test_is_an_engine(engine):
    assert isinstance(engine, Engine)
    assert 151645 in engine.eos_token_ids
    assert engine.info()["vocab_size"] == 151936


def test_length_finish_and_greedy_determinism(engine, prompt):
    a = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 8})
    b = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 8})
    assert len(a.output_ids) == len(a.logprobs) == 8
    assert a.finish_reason == FinishReason("length", matched=8)
    assert a.finish_reason.to_json() == {"type": "length", "length": 8}
    assert b.output_ids == a.output_ids
    assert a.prompt_tokens == len(prompt) and a.meta["completion_tokens"] == 8
    assert a.text == engine.tokenizer.decode(list(a.output_ids))
    zero = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 0})
    assert zero.output_ids == () and zero.finish_reason.type == "length"


def first_new_index(out, start=2):
    return next(i for i in range(start, len(out)) if out[i] not in out[:i])


def test_stop_token_ids_keep_the_ids_and_trim_only_text(engine, prompt):
    out = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 12}).output_ids
    i = first_new_index(out)
    stop = {**GREEDY, "max_new_tokens": 12, "stop_token_ids": [out[i]]}
    gen = engine.generate_sync(prompt, stop)
    assert gen.output_ids == out[: i + 1]
    assert gen.finish_reason == FinishReason("stop", matched=out[i])
    tok = engine.tokenizer
    assert gen.text == tok.decode(list(out[:i]))
    kept = engine.generate_sync(prompt, {**stop, "no_stop_trim": True})
    assert kept.output_ids == out[: i + 1] and kept.text == tok.decode(list(out[: i + 1]))


def test_eos_stops_by_default_unless_ignore_eos(engine, prompt):
    out = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 10}).output_ids
    i = first_new_index(out)
    engine.eos_token_ids = frozenset({out[i]})  # pretend that token is the model's EOS
    by_default = engine.generate_sync(prompt, {"temperature": 0.0, "max_new_tokens": 10})
    assert by_default.output_ids == out[: i + 1] and by_default.finish_reason.matched == out[i]
    ignored = engine.generate_sync(prompt, {"temperature": 0.0, "max_new_tokens": 10, "ignore_eos": True})
    assert ignored.output_ids == out


def test_min_new_tokens_masks_stop_ids(engine, prompt):
    first = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 1}).output_ids[0]
    gen = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 4, "stop_token_ids": [first], "min_new_tokens": 3})
    assert first not in gen.output_ids[:3]
    assert all(lp > float("-inf") for lp in gen.logprobs)


def test_stop_strings(engine, prompt):
    tok = engine.tokenizer
    out = list(engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 16}).output_ids)
    pieces = [tok.decode([t]) for t in out]
    i = next(k for k in range(2, len(out)) if pieces[k].strip() and pieces[k] not in tok.decode(out[:k]))
    s = pieces[i]
    j = next(k for k in range(len(out)) if s in tok.decode(out[: k + 1]))  # first step it shows up
    gen = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 16, "stop": [s, "never-seen"]})
    assert gen.finish_reason == FinishReason("stop", matched=s)
    assert list(gen.output_ids) == out[: j + 1]  # ids are never trimmed
    full = tok.decode(out[: j + 1])
    assert gen.text == full[: full.find(s)]
    kept = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 16, "stop": s, "no_stop_trim": True})
    assert kept.text == full and kept.output_ids == gen.output_ids


def test_sampling_seed_reproducible_whatever_ran_before(engine, prompt):
    sp = {"temperature": 1.0, "max_new_tokens": 16, "ignore_eos": True, "sampling_seed": 7}
    a = engine.generate_sync(prompt, sp)
    engine.generate_sync(prompt, {"temperature": 1.0, "max_new_tokens": 5})
    b = engine.generate_sync(prompt, sp)
    c = engine.generate_sync(prompt, {**sp, "sampling_seed": 8})
    assert a.output_ids == b.output_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert c.output_ids != a.output_ids


def test_engine_seed_makes_unseeded_requests_reproducible(tiny, prompt):
    sp = {"temperature": 1.0, "max_new_tokens": 12, "ignore_eos": True}
    runs = []
    for _ in range(2):
        eng = LocalEngine(*tiny, device="cpu", seed=123, prefix_cache_entries=0)
        runs.append([eng.generate_sync(prompt, sp).output_ids for _ in range(2)])
        asyncio.run(eng.close())
    assert runs[0] == runs[1] and runs[0][0] != runs[0][1]


@pytest.mark.parametrize(
    "sp,temperature",
    [
        ({"temperature": 0.0}, 1.0),
        ({"temperature": 1.0}, 1.0),
        ({"temperature": 0.7, "top_p": 0.9, "top_k": 50}, 0.7),  # reported before the top-p/k cut
    ],
)
def test_logprobs_match_a_full_forward_pass(tiny, prompt, sp, temperature):
    model, _ = tiny
    eng = LocalEngine(*tiny, device="cpu", seed=0, prefix_cache_entries=0)
    gen = eng.generate_sync(prompt, {**sp, "max_new_tokens": 24, "ignore_eos": True, "sampling_seed": 1})
    asyncio.run(eng.close())
    assert len(gen.logprobs) == len(gen.output_ids) == 24
    ref = reference_logprobs(model, prompt, gen.output_ids, temperature)
    assert gen.logprobs == pytest.approx(ref, abs=1e-4)


def test_original_logprob_mode_reports_the_raw_distribution(tiny, prompt):
    model, _ = tiny
    eng = LocalEngine(*tiny, device="cpu", logprob_mode="original", prefix_cache_entries=0)
    gen = eng.generate_sync(prompt, {"temperature": 0.5, "max_new_tokens": 10, "sampling_seed": 2})
    asyncio.run(eng.close())
    assert gen.logprobs == pytest.approx(reference_logprobs(model, prompt, gen.output_ids), abs=1e-4)


def test_decoding_is_incremental(engine, prompt):
    fed: list[int] = []
    forward = engine._forward

    def spy(ids, kv):
        fed.append(len(ids))
        return forward(ids, kv)

    engine._forward = spy
    gen = engine.generate_sync(prompt, {**GREEDY, "max_new_tokens": 10})
    assert fed == [len(prompt)] + [1] * (len(gen.output_ids) - 1)


def test_prefix_cache_reuse_is_reported_and_changes_nothing(tiny, prompt):
    cached = LocalEngine(*tiny, device="cpu", seed=0)
    plain = LocalEngine(*tiny, device="cpu", seed=0, prefix_cache_entries=0)
    sp = {"temperature": 1.0, "max_new_tokens": 12, "ignore_eos": True, "sampling_seed": 3}
    first = cached.generate_sync(prompt, sp)
    assert first.cached_tokens == 0
    same = cached.generate_sync(prompt, sp)
    assert same.cached_tokens == len(prompt) - 1  # one token is always recomputed
    turn2 = list(prompt) + list(first.output_ids) + engine_tokens(cached, "<|im_end|>\nmore")
    a = cached.generate_sync(turn2, sp)
    b = plain.generate_sync(turn2, sp)
    assert a.cached_tokens >= len(prompt) and b.cached_tokens == 0
    assert a.output_ids == b.output_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert same.output_ids == first.output_ids
    branch = list(prompt[:-2]) + [100, 200]  # shares only part of an entry: copied and cropped
    c = cached.generate_sync(branch, sp)
    d = plain.generate_sync(branch, sp)
    assert c.cached_tokens == len(prompt) - 2 and c.output_ids == d.output_ids
    for eng in (cached, plain):
        asyncio.run(eng.close())


def engine_tokens(engine, text):
    return engine.tokenizer.encode(text)


def test_bad_requests_raise_engine_error_400(tiny):
    eng = LocalEngine(*tiny, device="cpu", context_length=16)
    for ids, sp, message in [
        ([1, 2], {"nope": 1}, "unknown sampling param"),
        ([1, 10**9], {}, "out of range"),
        ([], {}, "empty"),
        (list(range(16)), {}, "longer than the context length"),
    ]:
        with pytest.raises(EngineError, match=message) as info:
            eng.generate_sync(ids, sp)
        assert info.value.status == 400
    capped = eng.generate_sync(list(range(10)), {**GREEDY, "max_new_tokens": 100})
    assert len(capped.output_ids) == 6 and capped.finish_reason.type == "length"
    asyncio.run(eng.close())


def test_async_generate_serialises_and_abort_returns_partial_tokens(tiny, prompt):
    eng = LocalEngine(*tiny, device="cpu", seed=0)
    forward, calls = eng._forward, []

    def spy(ids, kv):  # runs on the worker thread: abort both requests during the 5th forward
        calls.append(len(ids))
        if len(calls) == 5:
            deadline = time.monotonic() + 10
            while "queued" not in eng._requests and time.monotonic() < deadline:
                time.sleep(0.01)
            assert eng.abort("queued") and eng.abort("long")
        return forward(ids, kv)

    eng._forward = spy

    async def main():
        long = asyncio.ensure_future(eng.generate(prompt, {"max_new_tokens": 100000, "ignore_eos": True}, rid="long"))
        queued = asyncio.ensure_future(eng.generate(prompt, {"max_new_tokens": 4}, rid="queued"))
        gens = await asyncio.gather(long, queued)
        assert not eng.abort("long")  # finished requests are forgotten
        others = await asyncio.gather(*(eng.generate([5, 6, 7], {**GREEDY, "max_new_tokens": 3}) for _ in range(4)))
        await eng.close()
        with pytest.raises(EngineError):
            await eng.generate([1], {})
        return gens, others

    (long, queued), others = asyncio.run(main())
    assert long.finish_reason == FinishReason("abort", message="aborted")
    assert len(long.output_ids) == len(long.logprobs) == 4  # sampled before the 5th forward ended
    assert queued.finish_reason.type == "abort" and queued.output_ids == ()
    assert all(o.output_ids == others[0].output_ids and len(o.output_ids) == 3 for o in others)


def test_cancelling_the_caller_stops_the_worker(tiny, prompt):
    async def main():
        eng = LocalEngine(*tiny, device="cpu")
        task = asyncio.ensure_future(eng.generate(prompt, {"max_new_tokens": 100000, "ignore_eos": True}))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await asyncio.wait_for(eng.generate(prompt, {"max_new_tokens": 2}), timeout=30)
        await eng.close()
        return after

    assert len(asyncio.run(main()).output_ids) <= 2
