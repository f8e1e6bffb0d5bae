"""SGLangEngine against FakeSGLangServerForTests: request shape, parsing, retries, timeouts, aborts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from graphrl.engines.base import Engine, EngineError, FinishReason
from graphrl.engines.server import serving
from graphrl.engines.sglang import SGLangEngine, parse_generate_response

Handler = Callable[[web.Request, dict], Awaitable[web.StreamResponse]]


def ok_body(ids=(5, 6, 7), lps=(-0.5, -0.25, -1.0), *, finish=None, meta_extra=None, **top):
    meta = {
        "id": "x",
        "finish_reason": finish or {"type": "stop", "matched": 7},
        "prompt_tokens": 3,
        "completion_tokens": len(ids),
        "cached_tokens": 2,
        "output_token_logprobs": [[lp, t, None] for lp, t in zip(lps, ids)],
        "weight_version": "v3",
    }
    meta.update(meta_extra or {})
    body = {"text": "abc", "output_ids": list(ids), "meta_info": meta}
    body.update(top)
    return body


class FakeSGLangServerForTests:
    """A scripted SGLang: records every request; `generate` decides each /generate answer."""

    def __init__(self, generate: Handler | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.aborts: list[Any] = []
        self.generate = generate or self.default_generate
        self.url = ""

    @staticmethod
    async def default_generate(request: web.Request, body: dict) -> web.StreamResponse:
        return web.json_response(ok_body())

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort)
        app.router.add_get("/health", self._health)
        app.router.add_get("/get_model_info", self._model_info)
        return app

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def _model_info(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"model_path": "m", "tokenizer_path": "m", "is_generation": True})

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        self.requests.append(("/generate", dict(request.headers), body))
        return await self.generate(request, body)

    async def _abort(self, request: web.Request) -> web.StreamResponse:
        self.aborts.append(json.loads(await request.read()))
        return web.Response(status=200)

    @contextlib.asynccontextmanager
    async def running(self, port: int = 0) -> AsyncIterator[str]:
        async with serving(self.app(), "127.0.0.1", port) as url:
            self.url = url
            yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(coro):
    return asyncio.run(coro)


def test_is_an_engine():
    assert isinstance(SGLangEngine("http://127.0.0.1:1"), Engine)


def test_request_shape_and_parsing():
    async def main():
        fake = FakeSGLangServerForTests()
        async with fake.running() as url:
            engine = SGLangEngine(url)
            sp = {"max_new_tokens": 8, "temperature": 1.0, "stop_token_ids": [7], "sampling_seed": 3}
            gen = await engine.generate((1, 2, 3), sp, session_id="sess-1")
            gen2 = await engine.generate([4], sp)
            await engine.close()
        return fake, gen, gen2

    fake, gen, gen2 = run(main())
    (path, headers, body), (_, headers2, body2) = fake.requests
    assert set(body) == {"input_ids", "sampling_params", "return_logprob", "rid"}
    assert body["input_ids"] == [1, 2, 3]
    assert body["sampling_params"] == {
        "max_new_tokens": 8,
        "temperature": 1.0,
        "stop_token_ids": [7],
        "sampling_seed": 3,
    }
    assert body["return_logprob"] is True
    assert isinstance(body["rid"], str) and body["rid"] != body2["rid"]
    assert headers["X-SMG-Routing-Key"] == "sess-1"
    assert headers["Content-Type"] == "application/json"
    assert "X-SMG-Routing-Key" not in headers2
    assert gen.output_ids == (5, 6, 7)
    assert gen.logprobs == (-0.5, -0.25, -1.0)
    assert gen.finish_reason == FinishReason("stop", matched=7)
    assert (gen.text, gen.prompt_tokens, gen.cached_tokens) == ("abc", 3, 2)
    assert gen.meta["rid"] == body["rid"] and gen.meta["weight_version"] == "v3"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ({"type": "stop", "matched": 151645}, FinishReason("stop", matched=151645)),
        ({"type": "stop", "matched": "</search>"}, FinishReason("stop", matched="</search>")),
        ({"type": "stop", "matched": None}, FinishReason("stop")),
        ({"type": "length", "length": 3}, FinishReason("length", matched=3)),
        ({"type": "abort", "message": "Abort before prefill"}, FinishReason("abort", message="Abort before prefill")),
        ("length", FinishReason("length")),
    ],
)
def test_finish_reasons(raw, expected):
    assert parse_generate_response(ok_body(finish=raw)).finish_reason == expected


@pytest.mark.parametrize("raw", [None, {"type": "eos"}, "done", 3])
def test_unknown_finish_reason_is_an_error(raw):
    body = ok_body()
    body["meta_info"]["finish_reason"] = raw
    with pytest.raises(EngineError):
        parse_generate_response(body)


def test_aborted_in_queue_missing_fields_default_to_zero():
    body = {
        "text": "",
        "output_ids": [],
        "meta_info": {"id": "r", "finish_reason": {"type": "abort", "message": "queued"}},
    }
    gen = parse_generate_response(body)
    assert gen.output_ids == () and gen.logprobs == ()
    assert gen.prompt_tokens == 0 and gen.cached_tokens == 0
    assert gen.finish_reason.type == "abort"


def test_weight_version_and_spec_counters_are_kept():
    body = ok_body()
    body["meta_info"].update(weight_version="w3", spec_accept_token_num=5, spec_draft_token_num=8, spec_verify_ct=2)
    meta = parse_generate_response(body).meta
    assert meta["weight_version"] == "w3"
    assert (meta["spec_accept_token_num"], meta["spec_draft_token_num"], meta["spec_verify_ct"]) == (5, 8, 2)
    assert "spec_verify_ct" not in parse_generate_response(ok_body()).meta  # only when the server sent them


def test_missing_cached_tokens_with_tokens():
    body = ok_body(meta_extra={"cached_tokens": None})
    del body["meta_info"]["prompt_tokens"]
    gen = parse_generate_response(body)
    assert (gen.cached_tokens, gen.prompt_tokens, len(gen.output_ids)) == (0, 0, 3)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b.update(output_ids=[5, 6]),  # count mismatch
        lambda b: b.update(output_ids=[5, 6, 8]),  # disagreement
        lambda b: b["meta_info"]["output_token_logprobs"].pop(),  # count mismatch the other way
        lambda b: b["meta_info"]["output_token_logprobs"].__setitem__(0, [None, 5, None]),
        lambda b: b["meta_info"]["output_token_logprobs"].__setitem__(0, [-0.1, "5", None]),
        lambda b: b["meta_info"]["output_token_logprobs"].__setitem__(0, [-0.1, True, None]),
        lambda b: b["meta_info"]["output_token_logprobs"].__setitem__(0, [-0.1]),
        lambda b: b["meta_info"]["output_token_logprobs"].__setitem__(0, 7),
        lambda b: b["meta_info"].pop("output_token_logprobs"),  # tokens but no log-probs
        lambda b: b.pop("meta_info"),
    ],
)
def test_malformed_tokens_are_errors_never_fixed(mutate):
    body = ok_body()
    mutate(body)
    with pytest.raises(EngineError) as info:
        parse_generate_response(body)
    assert info.value.retryable is False


def test_output_ids_absent_trusts_logprob_ids():
    body = ok_body()
    del body["output_ids"]
    assert parse_generate_response(body).output_ids == (5, 6, 7)


def test_count_mismatch_over_http_is_engine_error():
    async def answer(request, body):
        return web.json_response(ok_body(output_ids=[5, 6]))

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            async with SGLangEngine(url) as engine:
                with pytest.raises(EngineError, match="disagree"):
                    await engine.generate([1], {})
        assert len(fake.requests) == 1

    run(main())


def test_retries_connection_refused_then_succeeds():
    port = free_port()

    async def main():
        fake = FakeSGLangServerForTests()
        engine = SGLangEngine(f"127.0.0.1:{port}", max_retries=20, backoff_s=0.05, max_backoff_s=0.1)
        task = asyncio.ensure_future(engine.generate([1, 2], {"max_new_tokens": 3}))
        await asyncio.sleep(0.3)  # several refused attempts
        assert not task.done()
        async with fake.running(port):
            gen = await asyncio.wait_for(task, 5)
        await engine.close()
        return fake, gen

    fake, gen = run(main())
    assert gen.output_ids == (5, 6, 7)
    assert len(fake.requests) == 1


def test_retries_are_bounded_with_exponential_backoff():
    port = free_port()

    async def main():
        engine = SGLangEngine(f"http://127.0.0.1:{port}", max_retries=3, backoff_s=0.05)
        t0 = time.monotonic()
        with pytest.raises(EngineError) as info:
            await engine.generate([1], {})
        elapsed = time.monotonic() - t0
        await engine.close()
        return info.value, elapsed

    err, elapsed = run(main())
    assert err.retryable is True
    assert "4 attempt" in str(err)
    assert elapsed >= 0.05 + 0.1 + 0.2 - 0.02


@pytest.mark.parametrize("status", [500, 502, 400, 404, 422])
def test_no_retry_on_http_errors(status):
    async def answer(request, body):
        return web.Response(status=status, text="boom")

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            async with SGLangEngine(url, max_retries=5, backoff_s=0.01) as engine:
                with pytest.raises(EngineError) as info:
                    await engine.generate([1], {})
        return fake, info.value

    fake, err = run(main())
    assert len(fake.requests) == 1
    assert err.retryable is False and err.status == status
    assert "boom" in str(err)


def test_503_is_retryable_but_not_retried_by_default():
    async def answer(request, body):
        return web.Response(status=503, text="starting")

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            async with SGLangEngine(url, backoff_s=0.01) as engine:
                with pytest.raises(EngineError) as info:
                    await engine.generate([1], {})
        return fake, info.value

    fake, err = run(main())
    assert len(fake.requests) == 1
    assert err.retryable is True and err.status == 503


def test_retry_on_503_when_asked():
    async def answer(request, body):
        if len(fake.requests) < 3:
            return web.Response(status=503)
        return web.json_response(ok_body())

    fake = FakeSGLangServerForTests(answer)

    async def main():
        async with fake.running() as url:
            async with SGLangEngine(url, retry_on_503=True, backoff_s=0.01) as engine:
                return await engine.generate([1], {})

    assert run(main()).output_ids == (5, 6, 7)
    assert len(fake.requests) == 3


def test_disconnect_after_send_is_not_retried():
    async def answer(request, body):
        request.transport.close()
        await asyncio.sleep(1)
        return web.json_response(ok_body())

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            async with SGLangEngine(url, max_retries=5, backoff_s=0.01) as engine:
                with pytest.raises(EngineError) as info:
                    await engine.generate([1], {})
                await asyncio.sleep(0.1)
        return fake, info.value

    fake, err = run(main())
    assert len(fake.requests) == 1 and err.retryable is False


def test_invalid_json_response_is_engine_error():
    async def answer(request, body):
        return web.Response(status=200, text="<html>not json")

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            async with SGLangEngine(url) as engine:
                with pytest.raises(EngineError, match="invalid JSON"):
                    await engine.generate([1], {})

    run(main())


def test_timeout_is_engine_error_and_aborts():
    async def answer(request, body):
        await asyncio.sleep(10)
        return web.json_response(ok_body())

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            engine = SGLangEngine(url, timeout_s=0.3, max_retries=5)
            t0 = time.monotonic()
            with pytest.raises(EngineError, match="timed out") as info:
                await engine.generate([1], {})
            assert time.monotonic() - t0 < 5
            await engine.close()  # waits for the best-effort abort
        return fake, info.value

    fake, err = run(main())
    assert err.retryable is False
    assert len(fake.requests) == 1
    assert fake.aborts == [{"rid": fake.requests[0][2]["rid"]}]


def test_cancellation_sends_abort_request_and_reraises():
    async def main():
        entered = asyncio.Event()

        async def answer(request, body):
            entered.set()
            await asyncio.sleep(10)
            return web.json_response(ok_body())

        fake = FakeSGLangServerForTests(answer)
        async with fake.running() as url:
            engine = SGLangEngine(url)
            task = asyncio.ensure_future(engine.generate([1, 2], {}, rid="my-rid"))
            await asyncio.wait_for(entered.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                if fake.aborts:
                    break
                await asyncio.sleep(0.01)
            await engine.close()
        return fake

    fake = run(main())
    assert fake.requests[0][2]["rid"] == "my-rid"
    assert fake.aborts == [{"rid": "my-rid"}]


def test_helpers_abort_all_health_model_info():
    async def main():
        fake = FakeSGLangServerForTests()
        async with fake.running() as url:
            async with SGLangEngine(url) as engine:
                assert await engine.health() is True
                info = await engine.model_info()
                await engine.abort_all()
                await engine.abort("r1")
                await engine.wait_until_healthy(timeout_s=1)
        down = SGLangEngine(f"http://127.0.0.1:{free_port()}")
        assert await down.health() is False
        with pytest.raises(EngineError):
            await down.model_info()
        with pytest.raises(EngineError):
            await down.wait_until_healthy(timeout_s=0.2, poll_s=0.05)
        await down.close()
        return fake, info

    fake, info = run(main())
    assert info["model_path"] == "m"
    assert fake.aborts == [{"rid": "", "abort_all": True}, {"rid": "r1"}]


def test_one_session_for_many_concurrent_calls_and_new_loop_ok():
    async def answer(request, body):
        await asyncio.sleep(0.05)
        return web.json_response(ok_body())

    port = free_port()
    engine = SGLangEngine(f"127.0.0.1:{port}", max_connections=1024)

    async def main():
        fake = FakeSGLangServerForTests(answer)
        async with fake.running(port):
            gens = await asyncio.gather(*(engine.generate([i], {}) for i in range(300)))
            session = await engine._client()
            await engine.generate([1], {})
            assert await engine._client() is session
            await engine.close()  # closes this loop's session now (else it closes when the loop ends)
            assert session.closed
        return fake, gens

    fake, gens = run(main())
    assert len(fake.requests) == 300 + 1 and all(g.output_ids == (5, 6, 7) for g in gens)
    fake2, _ = run(main())  # the same engine in a second event loop gets a fresh session
    assert len(fake2.requests) == 301


def test_external_session_is_used_and_not_closed():
    import aiohttp

    async def main():
        fake = FakeSGLangServerForTests()
        async with fake.running() as url:
            async with aiohttp.ClientSession() as session:
                engine = SGLangEngine(url, session=session)
                await engine.generate([1], {})
                await engine.close()
                assert not session.closed
                await engine.generate([1], {})

    run(main())


def test_bad_constructor_arguments():
    with pytest.raises(ValueError):
        SGLangEngine("x", max_retries=-1)
    with pytest.raises(ValueError):
        SGLangEngine("x", timeout_s=0)


def _scoring_server(entries):
    async def answer(request: web.Request, body: dict) -> web.StreamResponse:
        meta = {"finish_reason": {"type": "length", "length": 0}, "completion_tokens": 0}
        meta.update(output_token_logprobs=[], input_token_logprobs=entries)
        return web.json_response({"text": "", "output_ids": [], "meta_info": meta})

    return FakeSGLangServerForTests(answer)


def test_token_logprobs_request_and_alignment():
    """A teacher scoring ids[start:]: max_new_tokens 0 and logprob_start_len start - 1; SGLang's reply
    covers tokens start.. (its rule skips token start - 1), and the ids of the entries are checked."""

    async def main():
        fake = _scoring_server([[-0.1, 13, None], [-0.2, 14, None]])
        async with fake.running() as url:
            engine = SGLangEngine(url)
            got = await engine.token_logprobs([10, 11, 12, 13, 14], 3, {"temperature": 0.7}, session_id="s")
            await engine.close()
        return fake, got

    fake, got = run(main())
    (_, headers, body) = fake.requests[0]
    assert body["input_ids"] == [10, 11, 12, 13, 14]
    assert body["sampling_params"] == {"temperature": 0.7, "max_new_tokens": 0}
    assert body["return_logprob"] is True and body["logprob_start_len"] == 2
    assert headers["X-SMG-Routing-Key"] == "s"
    assert got == (-0.1, -0.2)


@pytest.mark.parametrize(
    "entries, fragment",
    [
        ([[-0.1, 99, None], [-0.2, 14, None]], "ids differ"),  # not the tokens sent
        ([[-0.2, 14, None]], "input_token_logprobs for 2"),  # too few
        (None, "input_token_logprobs for 2"),  # a server that ignores logprob_start_len
        ([[None, 13, None], [-0.2, 14, None]], "malformed"),
        ([["-0.1", 13, None], [-0.2, 14, None]], "malformed"),
    ],
)
def test_token_logprobs_never_guess(entries, fragment):
    async def main():
        async with _scoring_server(entries).running() as url:
            engine = SGLangEngine(url)
            try:
                with pytest.raises(EngineError, match=fragment):
                    await engine.token_logprobs([10, 11, 12, 13, 14], 3, {})
            finally:
                await engine.close()

    run(main())
