"""End to end: SGLangEngine -> HTTP -> make_app(LocalEngine(tiny Qwen2)), all in-process.

The real client, the real server and the real embedded engine: ids and log-probs that come back over
HTTP are exactly what the engine sampled (compared with the same seeded request made directly).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphrl.engines.base import FinishReason
from graphrl.engines.server import SERVER_KEY, make_app, serving
from graphrl.engines.sglang import SGLangEngine

local = pytest.importorskip("graphrl.engines.local")
registry = pytest.importorskip("graphrl.models.registry")


@pytest.fixture(scope="module")
def tiny():
    return registry.load_model("tiny")


def make_engine(tiny, **options):
    model, tokenizer = tiny
    return local.LocalEngine(model, tokenizer, device="cpu", seed=0, **options), tokenizer


def test_http_round_trip_is_token_exact(tiny):
    async def main():
        # no KV prefix cache: a cache hit changes float rounding, and this compares exact bits
        engine, tokenizer = make_engine(tiny, prefix_cache_entries=0)
        prompt = tokenizer.encode("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")
        sp = {
            "max_new_tokens": 12,
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": -1,
            "sampling_seed": 1234,
            "stop_token_ids": [151645],
            "skip_special_tokens": False,
            "no_stop_trim": True,
            "spaces_between_special_tokens": False,
        }
        direct = await engine.generate(prompt, sp)
        app = make_app(engine, tokenizer, model_path="tiny", tokenizer_path="qwen")
        async with serving(app) as url:
            client = SGLangEngine(url)
            assert await client.health()
            info = await client.model_info()
            via_http = await client.generate(prompt, sp, session_id="s-1")
            again = await client.generate(prompt, sp, session_id="s-1")
            await client.close()
        await engine.close()
        return prompt, direct, via_http, again, info, tokenizer

    prompt, direct, via_http, again, info, tokenizer = asyncio.run(main())
    assert info["model_path"] == "tiny" and info["is_generation"] is True
    assert via_http.output_ids == direct.output_ids
    assert via_http.logprobs == direct.logprobs  # floats survive JSON exactly
    assert via_http.finish_reason == direct.finish_reason
    assert via_http.text == tokenizer.decode(list(via_http.output_ids), skip_special_tokens=False)
    assert via_http.prompt_tokens == len(prompt)
    assert again.output_ids == direct.output_ids
    assert len(via_http.output_ids) == len(via_http.logprobs) > 0


def test_concurrent_clients_and_abort_with_partial_tokens(tiny):
    async def main():
        engine, tokenizer = make_engine(tiny)
        app = make_app(engine, tokenizer, model_path="tiny")
        async with serving(app) as url:
            client = SGLangEngine(url)
            sp = {"max_new_tokens": 6, "temperature": 0.0}
            gens = await asyncio.gather(*(client.generate([100 + i, 200], sp) for i in range(16)))
            long = asyncio.ensure_future(
                client.generate([1, 2, 3], {"max_new_tokens": 100000, "ignore_eos": True}, rid="long-one")
            )
            for _ in range(500):
                if app[SERVER_KEY].in_flight:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # usually some tokens by now (0 on a loaded machine is fine)
            await client.abort("long-one")
            aborted = await asyncio.wait_for(long, 30)
            await client.close()
        await engine.close()
        return gens, aborted

    gens, aborted = asyncio.run(main())
    for gen in gens:
        assert 1 <= len(gen.output_ids) <= 6 and gen.finish_reason.type in ("stop", "length")
    assert aborted.finish_reason == FinishReason("abort", message="aborted")
    assert len(aborted.output_ids) < 100000  # stopped early; partial tokens: see test_server.py
    assert len(aborted.logprobs) == len(aborted.output_ids)


def test_text_request_and_bad_token_id_are_handled(tiny):
    async def main():
        import aiohttp

        engine, tokenizer = make_engine(tiny)
        app = make_app(engine, tokenizer, model_path="tiny")
        async with serving(app) as url:
            async with aiohttp.ClientSession() as s:
                async with s.post(
                    url + "/generate",
                    json={"text": "Hi", "sampling_params": {"max_new_tokens": 3}, "return_logprob": True},
                ) as r:
                    ok = r.status, await r.json()
                async with s.post(url + "/generate", json={"input_ids": [10**9]}) as r:
                    bad = r.status, await r.json()
        await engine.close()
        return ok, bad, tokenizer

    (s1, ok), (s2, bad), tokenizer = asyncio.run(main())
    assert s1 == 200 and ok["meta_info"]["prompt_tokens"] == len(tokenizer.encode("Hi"))
    assert len(ok["meta_info"]["output_token_logprobs"]) == len(ok["output_ids"])
    assert s2 == 400 and "out of range" in bad["error"]["message"]


def test_prompt_logprobs_score_what_the_engine_sampled(tiny):
    """logprob_start_len over HTTP: SGLang's input_token_logprobs layout, and a sequence scored by the
    client's token_logprobs gets the log-probs the engine reported when it sampled those tokens
    (one forward pass instead of incremental decoding: equal up to float rounding)."""

    async def main():
        engine, tokenizer = make_engine(tiny)
        prompt = tokenizer.encode("<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")
        sp = {"max_new_tokens": 8, "temperature": 0.8, "sampling_seed": 5, "ignore_eos": True}
        gen = await engine.generate(prompt, sp)
        ids = prompt + list(gen.output_ids)
        app = make_app(engine, tokenizer, model_path="tiny")
        async with serving(app) as url:
            client = SGLangEngine(url)
            scored = await client.token_logprobs(ids, len(prompt), {"temperature": 0.8})
            whole = await client.token_logprobs(ids, 1, {"temperature": 0.8})
            async with aiohttp.ClientSession() as http:
                body = {
                    "input_ids": ids,
                    "sampling_params": {"max_new_tokens": 0, "temperature": 0.8},
                    "return_logprob": True,
                }
                async with http.post(url + "/generate", json={**body, "logprob_start_len": 0}) as r:
                    zero = (await r.json())["meta_info"]
                async with http.post(url + "/generate", json={**body, "logprob_start_len": 3}) as r:
                    three = (await r.json())["meta_info"]
            await client.close()
        await engine.close()
        return ids, gen, scored, whole, zero, three

    ids, gen, scored, whole, zero, three = asyncio.run(main())
    assert len(gen.output_ids) == 8 and len(scored) == 8
    assert scored == pytest.approx(gen.logprobs, abs=1e-4)
    assert whole[-8:] == scored and len(whole) == len(ids) - 1
    assert zero["output_token_logprobs"] == [] and zero["completion_tokens"] == 0
    assert [e[1] for e in zero["input_token_logprobs"]] == ids and zero["input_token_logprobs"][0][0] is None
    assert [e[0] for e in zero["input_token_logprobs"][1:]] == list(whole)
    assert [e[1] for e in three["input_token_logprobs"]] == ids[4:]  # SGLang's rule: from token k + 1
