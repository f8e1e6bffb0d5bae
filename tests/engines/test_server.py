"""The SGLang-protocol server over deterministic engine doubles: shapes, 400s, abort, concurrency."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import pytest

from graphrl.engines.base import EngineError, FinishReason, Generation
from graphrl.engines.server import SERVER_KEY, make_app, serving
from graphrl.engines.sglang import SGLangEngine


class CharTokenizerForTests:
    """One token per character: id = ord(c). Ids >= 1000 are 'special' (skipped on request)."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(chr(i) for i in ids if not (skip_special_tokens and i >= 1000))


class CountingEngineForTests:
    """Deterministic: token k of the answer is 97 + (sum(prompt) + k) % 26; log-prob -(k+1)/10.

    Stops at a stop_token_id (finish stop) or after max_new_tokens (finish length). `step_s` sleeps
    between tokens, so requests stay in flight long enough to abort them.
    """

    def __init__(self, step_s: float = 0.0) -> None:
        self.step_s = step_s
        self.calls: list[dict[str, Any]] = []
        self.active = 0
        self.peak = 0

    def answer(self, prompt: Sequence[int], n: int) -> list[int]:
        return [97 + (sum(prompt) + k) % 26 for k in range(n)]

    async def _run(self, input_ids, sampling_params, session_id, should_stop=lambda: False):
        self.calls.append({"input_ids": list(input_ids), "sp": dict(sampling_params), "session_id": session_id})
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            n = sampling_params.get("max_new_tokens", 16)
            stops = set(sampling_params.get("stop_token_ids", ()))
            ids: list[int] = []
            for tok in self.answer(input_ids, n):
                if self.step_s:
                    await asyncio.sleep(self.step_s)
                else:
                    await asyncio.sleep(0)
                if should_stop():
                    return ids, FinishReason("abort", message="engine abort")
                ids.append(tok)
                if tok in stops:
                    return ids, FinishReason("stop", matched=tok)
            return ids, FinishReason("length", matched=n)
        finally:
            self.active -= 1

    async def generate(self, input_ids, sampling_params, *, session_id=None) -> Generation:
        ids, finish = await self._run(input_ids, sampling_params, session_id)
        return Generation(tuple(ids), tuple(-(k + 1) / 10 for k in range(len(ids))), finish)

    async def close(self) -> None:
        pass


class AbortableEngineForTests(CountingEngineForTests):
    """Also implements the optional `abort(rid)`: returns the partial tokens as an abort."""

    def __init__(self, step_s: float = 0.0) -> None:
        super().__init__(step_s)
        self.live: set[str] = set()
        self.stop_requested: set[str] = set()

    async def generate(self, input_ids, sampling_params, *, session_id=None, rid=None):
        self.live.add(rid)
        try:
            ids, finish = await self._run(input_ids, sampling_params, session_id, lambda: rid in self.stop_requested)
        finally:
            self.live.discard(rid)
        return Generation(tuple(ids), tuple(-(k + 1) / 10 for k in range(len(ids))), finish, text="T" * len(ids))

    def abort(self, rid: str) -> bool:
        if rid not in self.live:
            return False
        self.stop_requested.add(rid)
        return True


class FailingEngineForTests(CountingEngineForTests):
    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc

    async def generate(self, input_ids, sampling_params, *, session_id=None):
        raise self.exc


class CachingEngineForTests(CountingEngineForTests):
    reports_cached_tokens = True

    async def generate(self, input_ids, sampling_params, *, session_id=None):
        gen = await super().generate(input_ids, sampling_params, session_id=session_id)
        return Generation(gen.output_ids, gen.logprobs, gen.finish_reason, cached_tokens=42)


def run(coro):
    return asyncio.run(coro)


async def post(url: str, path: str, body: Any, headers: Mapping[str, str] | None = None):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    async with aiohttp.ClientSession() as s:
        async with s.post(url + path, data=data, headers=headers) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None), r.headers.get("Content-Type")


async def get(url: str, path: str):
    async with aiohttp.ClientSession() as s:
        async with s.get(url + path) as r:
            text = await r.text()
            return r.status, text


def served(engine, tokenizer=None, **options):
    app = make_app(engine, tokenizer or CharTokenizerForTests(), model_path="test/model", **options)
    return app, serving(app)


def test_generate_response_shape():
    async def main():
        engine = CountingEngineForTests()
        app, ctx = served(engine)
        async with ctx as url:
            return engine, await post(
                url,
                "/generate",
                {
                    "input_ids": [1, 2, 3],
                    "rid": "r-1",
                    "return_logprob": True,
                    "sampling_params": {
                        "max_new_tokens": 4,
                        "temperature": 0.7,
                        "stop": None,
                        "skip_special_tokens": False,
                    },
                },
                {"X-SMG-Routing-Key": "sess-9"},
            )

    engine, (status, body, ctype) = run(main())
    assert status == 200 and ctype == "application/json"
    expected = engine.answer([1, 2, 3], 4)
    assert body["output_ids"] == expected
    assert body["text"] == "".join(map(chr, expected))
    meta = body["meta_info"]
    assert meta["id"] == "r-1"
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (3, 4, 0)
    assert meta["output_token_logprobs"] == [[-(k + 1) / 10, t, None] for k, t in enumerate(expected)]
    assert meta["weight_version"] == "default"
    assert engine.calls[0]["session_id"] == "sess-9"
    assert engine.calls[0]["sp"] == {
        "max_new_tokens": 4,
        "temperature": 0.7,
        "skip_special_tokens": False,
    }  # None dropped


def test_generate_without_logprobs_text_mode_and_text_in_logprobs():
    async def main():
        engine = CountingEngineForTests()
        app, ctx = served(engine)
        async with ctx as url:
            a = await post(url, "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
            b = await post(
                url,
                "/generate",
                {
                    "input_ids": [5],
                    "return_logprob": True,
                    "return_text_in_logprobs": True,
                    "sampling_params": {"max_new_tokens": 2},
                },
            )
        return engine, a, b

    engine, (sa, a, _), (sb, b, _) = run(main())
    assert sa == 200 and "output_token_logprobs" not in a["meta_info"]
    assert engine.calls[0]["input_ids"] == [ord("h"), ord("i")]
    assert a["meta_info"]["prompt_tokens"] == 2
    assert sb == 200
    assert [e[2] for e in b["meta_info"]["output_token_logprobs"]] == [chr(t) for t in b["output_ids"]]


def test_stop_token_finish_reason():
    async def main():
        engine = CountingEngineForTests()
        stop = engine.answer([1], 3)[1]
        app, ctx = served(engine)
        async with ctx as url:
            return stop, await post(
                url,
                "/generate",
                {"input_ids": [1], "sampling_params": {"max_new_tokens": 10, "stop_token_ids": [stop]}},
            )

    stop, (status, body, _) = run(main())
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert body["output_ids"][-1] == stop and len(body["output_ids"]) == 2


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"{not json", "invalid JSON"),
        ([1, 2], "JSON object"),
        ({"input_ids": [1], "text": "a"}, "not both"),
        ({}, "required"),
        ({"input_ids": [1], "stream": True}, "stream"),
        ({"input_ids": [[1, 2], [3]]}, "batched"),
        ({"text": ["a", "b"]}, "batched"),
        ({"input_ids": ["1"]}, "list of ints"),
        ({"input_ids": [True]}, "list of ints"),
        ({"input_ids": [-1]}, ">= 0"),
        ({"input_ids": []}, "empty"),
        ({"input_ids": [1], "sampling_params": [1]}, "JSON object"),
        ({"input_ids": [1], "sampling_params": {"max_tokens": 3}}, "unknown sampling param"),
        ({"input_ids": [1], "sampling_params": {"temperature": "hot"}}, "temperature"),
        ({"input_ids": [1], "sampling_params": {"max_new_tokens": 2.5}}, "max_new_tokens"),
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, "top_p"),
        ({"input_ids": [1], "sampling_params": {"top_k": 0}}, "top_k"),
        ({"input_ids": [1], "sampling_params": {"n": 2}}, "n > 1"),
        ({"input_ids": [1], "sampling_params": {"stop": [1]}}, "stop"),
        ({"input_ids": [1], "return_logprob": "yes"}, "return_logprob"),
        ({"input_ids": [1], "rid": 5}, "rid"),
        ({"input_ids": [1], "image_data": "x.png"}, "image_data"),
        ({"input_ids": [1], "top_logprobs_num": 5}, "top_logprobs_num"),
        ({"input_ids": [1, 2], "return_logprob": True, "logprob_start_len": 2}, "smaller than the prompt length"),
        ({"input_ids": [1, 2], "return_logprob": True, "logprob_start_len": "0"}, "logprob_start_len"),
        ({"input_ids": [1, 2], "return_logprob": True, "logprob_start_len": 0}, "not supported by this engine"),
    ],
)
def test_bad_requests_are_400_with_json_error(body, fragment):
    async def main():
        app, ctx = served(CountingEngineForTests())
        async with ctx as url:
            return await post(url, "/generate", body)

    status, payload, ctype = run(main())
    assert status == 400 and ctype == "application/json"
    assert fragment in payload["error"]["message"]
    assert "Traceback" not in payload["error"]["message"]


def test_unknown_routes_and_methods_are_json_errors():
    async def main():
        app, ctx = served(CountingEngineForTests())
        async with ctx as url:
            return await get(url, "/nope"), await get(url, "/generate")

    (s1, t1), (s2, t2) = run(main())
    assert s1 == 404 and "error" in json.loads(t1)
    assert s2 == 405 and "error" in json.loads(t2)


def test_text_request_without_tokenizer_is_400():
    async def main():
        app = make_app(CountingEngineForTests(), None, model_path="m")
        async with serving(app) as url:
            return await post(url, "/generate", {"text": "hello"})

    status, body, _ = run(main())
    assert status == 400 and "input_ids" in body["error"]["message"]


def test_engine_unsupported_sampling_param_is_400():
    engine = CountingEngineForTests()
    engine.supported_sampling_params = {"max_new_tokens", "temperature"}

    async def main():
        app, ctx = served(engine)
        async with ctx as url:
            ok = await post(
                url,
                "/generate",
                {
                    "input_ids": [1],
                    "sampling_params": {"max_new_tokens": 1, "no_stop_trim": True, "custom_params": {"a": 1}},
                },
            )
            bad = await post(url, "/generate", {"input_ids": [1], "sampling_params": {"regex": "a+"}})
        return ok, bad

    (s1, _, _), (s2, body, _) = run(main())
    assert s1 == 200
    assert s2 == 400 and "regex" in body["error"]["message"]


def test_health_model_info_and_loading_state():
    async def main():
        app = make_app(None, None, model_path="some/model", tokenizer_path="qwen", weight_version="w7")
        async with serving(app) as url:
            loading = (await get(url, "/health"), await post(url, "/generate", {"input_ids": [1]}))
            app[SERVER_KEY].attach(CountingEngineForTests(), CharTokenizerForTests())
            ready = await get(url, "/health"), await get(url, "/health_generate")
            info = await get(url, "/get_model_info")
            version = await get(url, "/get_weight_version")
            gen = await post(url, "/generate", {"text": "a", "sampling_params": {"max_new_tokens": 1}})
            client = SGLangEngine(url)
            client_info = await client.model_info()
            healthy = await client.health()
            await client.close()
        return loading, ready, info, version, gen, client_info, healthy

    (h0, g0), (h1, h2), info, version, gen, client_info, healthy = run(main())
    assert h0[0] == 503 and g0[0] == 503
    assert h1[0] == 200 and h2[0] == 200 and healthy
    info = json.loads(info[1])
    assert info["model_path"] == "some/model" and info["tokenizer_path"] == "qwen"
    assert info["is_generation"] is True and client_info == info
    assert json.loads(version[1]) == {"weight_version": "w7"}
    assert gen[0] == 200 and gen[1]["meta_info"]["weight_version"] == "w7"


async def _wait_in_flight(app, n=1):
    server = app[SERVER_KEY]
    for _ in range(1000):
        if server.in_flight >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("request never became in flight")


@pytest.mark.parametrize("engine_cls", [CountingEngineForTests, AbortableEngineForTests])
def test_abort_request_returns_abort_with_partial_tokens(engine_cls):
    async def main():
        engine = engine_cls(step_s=0.01)
        app, ctx = served(engine)
        async with ctx as url:
            pending = asyncio.ensure_future(
                post(
                    url,
                    "/generate",
                    {
                        "input_ids": [3, 4],
                        "rid": "slow",
                        "return_logprob": True,
                        "sampling_params": {"max_new_tokens": 1000},
                    },
                )
            )
            await _wait_in_flight(app)
            await asyncio.sleep(0.05)
            status, _, _ = await post(url, "/abort_request", {"rid": "slow"})
            assert status == 200
            result = await asyncio.wait_for(pending, 5)
            assert app[SERVER_KEY].in_flight == 0
        return engine, result

    engine, (status, body, _) = run(main())
    assert status == 200
    meta = body["meta_info"]
    assert meta["finish_reason"]["type"] == "abort"
    assert len(meta["output_token_logprobs"]) == len(body["output_ids"]) == meta["completion_tokens"]
    if engine_cls is AbortableEngineForTests:
        assert 0 < len(body["output_ids"]) < 1000  # the partial tokens, exactly as sampled
        assert body["output_ids"] == engine.answer([3, 4], len(body["output_ids"]))
        assert meta["finish_reason"]["message"] == "engine abort"
    else:
        assert body["output_ids"] == []  # cancelled: nothing to report
        assert engine.active == 0


def test_abort_all_and_abort_before_arrival():
    async def main():
        engine = CountingEngineForTests(step_s=0.01)
        app, ctx = served(engine)
        async with ctx as url:
            pending = [
                asyncio.ensure_future(
                    post(url, "/generate", {"input_ids": [i], "sampling_params": {"max_new_tokens": 1000}})
                )
                for i in range(5)
            ]
            await _wait_in_flight(app, 5)
            assert (await post(url, "/abort_request", {"rid": "", "abort_all": True}))[0] == 200
            results = await asyncio.wait_for(asyncio.gather(*pending), 5)
            # an abort that arrives before its request: the request stops at once
            assert (await post(url, "/abort_request", {"rid": "early"}))[0] == 200
            early = await post(url, "/generate", {"input_ids": [1], "rid": "early"})
            later = await post(
                url, "/generate", {"input_ids": [1], "rid": "early", "sampling_params": {"max_new_tokens": 2}}
            )
            bad = await post(url, "/abort_request", {"rid": 3})
        return results, early, later, bad

    results, early, later, bad = run(main())
    assert all(r[1]["meta_info"]["finish_reason"]["type"] == "abort" for r in results)
    assert early[1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert later[1]["meta_info"]["finish_reason"]["type"] == "length"  # tombstone used once
    assert bad[0] == 400


def test_duplicate_rid_in_flight_is_400():
    async def main():
        app, ctx = served(CountingEngineForTests(step_s=0.01))
        async with ctx as url:
            first = asyncio.ensure_future(
                post(url, "/generate", {"input_ids": [1], "rid": "dup", "sampling_params": {"max_new_tokens": 20}})
            )
            await _wait_in_flight(app)
            second = await post(url, "/generate", {"input_ids": [1], "rid": "dup"})
            return await first, second

    first, second = run(main())
    assert first[0] == 200 and second[0] == 400 and "duplicate" in second[1]["error"]["message"]


def test_client_timeout_aborts_engine_work():
    async def main():
        engine = CountingEngineForTests(step_s=0.01)
        app, ctx = served(engine)
        async with ctx as url:
            client = SGLangEngine(url, timeout_s=0.2)
            with pytest.raises(EngineError, match="timed out"):
                await client.generate([1], {"max_new_tokens": 100000})
            await client.close()
            for _ in range(1000):
                if app[SERVER_KEY].in_flight == 0 and engine.active == 0:
                    break
                await asyncio.sleep(0.01)
            return app[SERVER_KEY].in_flight, engine.active

    assert run(main()) == (0, 0)


def test_64_concurrent_requests():
    async def main():
        engine = CountingEngineForTests(step_s=0.002)
        app, ctx = served(engine)
        async with ctx as url:
            client = SGLangEngine(url)
            gens = await asyncio.gather(
                *(client.generate([i, i + 1], {"max_new_tokens": 8 + i % 5}, session_id=f"s{i}") for i in range(64))
            )
            await client.close()
        return engine, gens

    engine, gens = run(main())
    assert engine.peak > 1
    for i, gen in enumerate(gens):
        assert list(gen.output_ids) == engine.answer([i, i + 1], 8 + i % 5)
        assert gen.logprobs == tuple(-(k + 1) / 10 for k in range(len(gen.output_ids)))
        assert gen.finish_reason == FinishReason("length", matched=8 + i % 5)
    assert sorted(c["session_id"] for c in engine.calls) == sorted(f"s{i}" for i in range(64))


def test_prefix_accounting_reports_cached_tokens():
    async def main():
        engine = CountingEngineForTests()
        app, ctx = served(engine)
        async with ctx as url:
            client = SGLangEngine(url)
            sp = {"max_new_tokens": 5}
            prompt = [10, 11, 12, 13]
            first = await client.generate(prompt, sp)
            again = await client.generate(prompt, sp)
            turn2 = prompt + list(first.output_ids) + [20, 21]
            second = await client.generate(turn2, sp)
            other = await client.generate([10, 11, 99], sp)
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/flush_cache") as r:
                    assert r.status == 200
            flushed = await client.generate(prompt, sp)
            await client.close()
        return first, again, second, other, flushed

    first, again, second, other, flushed = run(main())
    assert first.cached_tokens == 0 and first.prompt_tokens == 4
    assert again.cached_tokens == 3  # capped at prompt_tokens - 1, like SGLang
    assert second.cached_tokens == 4 + 5  # prompt + previous output were cached
    assert other.cached_tokens == 2
    assert flushed.cached_tokens == 0


def test_engine_reported_cached_tokens_win():
    async def main():
        app, ctx = served(CachingEngineForTests())
        async with ctx as url:
            return await post(url, "/generate", {"input_ids": [1, 2]})

    assert run(main())[1]["meta_info"]["cached_tokens"] == 42


@pytest.mark.parametrize(
    "exc, status",
    [
        (EngineError("kaput"), 500),
        (EngineError("busy", retryable=True), 503),
        (EngineError("gone", status=502), 502),
        (ValueError("prompt too long"), 400),
        (RuntimeError("bug"), 500),
    ],
)
def test_engine_failures_become_json_errors(exc, status):
    async def main():
        app, ctx = served(FailingEngineForTests(exc))
        async with ctx as url:
            return await post(url, "/generate", {"input_ids": [1]})

    got, body, ctype = run(main())
    assert got == status and ctype == "application/json"
    assert "Traceback" not in body["error"]["message"]


def test_non_finite_logprob_is_500_not_null():
    class NanEngine(CountingEngineForTests):
        async def generate(self, input_ids, sampling_params, *, session_id=None):
            return Generation((1,), (float("-inf"),), FinishReason("length", matched=1))

    async def main():
        app, ctx = served(NanEngine())
        async with ctx as url:
            return await post(url, "/generate", {"input_ids": [1], "return_logprob": True})

    status, body, _ = run(main())
    assert status == 500 and "non-finite" in body["error"]["message"]
