"""An SGLang-protocol HTTP server over any Engine: SGLang `/generate` requests -> Engine.generate.

Input: JSON requests in SGLang's native shape (docs/architecture.md, slime contract §4). Output: SGLang-shaped
responses, so `SGLangEngine`, slime's rollout code and SGLang tooling talk to a laptop model exactly
as to a GPU server. Endpoints: POST /generate, POST /abort_request, GET /health (+ /health_generate),
GET /get_model_info, GET /get_weight_version, POST|GET /flush_cache.

Invariants:
- `output_ids` and `output_token_logprobs` are exactly the engine's `Generation` (never re-tokenised);
  a non-finite log-prob from the engine is a 500, never sent as null.
- Bad requests (bad JSON, wrong types, `input_ids` and `text` together, `stream`, batches, unknown
  sampling params, params the engine says it does not support) -> 400 with a JSON body
  `{"error": {"message", "type", "code"}}`; no handler ever returns a traceback.
- Abort: `POST /abort_request {"rid"}` (or `{"abort_all": true}`) makes that request's `/generate`
  return HTTP 200 with `finish_reason {"type": "abort"}` and the partial tokens. Engines with an
  optional `abort(rid)` (see `SupportsAbort`) are asked to stop and return their partial
  `Generation`; other engines' tasks are cancelled (the response then has no tokens). An abort for
  a rid not (yet) in flight is remembered for `tombstone_s`, so a request racing its own abort
  stops at once. A client that disconnects has its engine work aborted too.
- `cached_tokens`: the engine's own count when it sets `reports_cached_tokens = True`; otherwise a
  bounded radix tree of recently seen token sequences (`PrefixTracker`) reports the longest prefix
  seen before (prompts are inserted on admission, prompt + output on completion), capped at
  prompt_tokens - 1 like SGLang (the last prompt token is always computed).
- `logprob_start_len` k >= 0 with `return_logprob` adds `input_token_logprobs` as SGLang lays them
  out (prompt tokens k+1.., or all of them with a None first when k is 0), from an engine with
  `input_logprobs` (the local engine; others: 400). `max_new_tokens: 0` scores without generating.
- Unknown top-level request keys are ignored (SGLang does the same); keys whose effect this server
  cannot produce (`stream`, images, top-logprobs, ...) are 400 when set.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from graphrl.engines._json import dumps, loads
from graphrl.engines.base import ROUTING_HEADER, Engine, EngineError, FinishReason, Generation
from graphrl.engines.prefix_tracker import PrefixTracker
from graphrl.engines.server_request import BadRequest, GenerateRequest, parse_generate_request

__all__ = ["SupportsAbort", "EngineServer", "make_app", "serving", "run_server", "SERVER_KEY"]

log = logging.getLogger(__name__)
SERVER_KEY: Any = web.AppKey("graphrl_engine_server") if hasattr(web, "AppKey") else "graphrl_server"


class SupportsAbort(Protocol):
    """Optional Engine extension: `generate(..., rid=...)` plus `abort(rid)` (sync or async).

    After `abort(rid)` the pending `generate` returns a `Generation` with finish_reason "abort" and
    the tokens sampled so far. `abort` returns False when it does not know the rid.
    """

    def abort(self, rid: str) -> Any: ...


@dataclass
class _InFlight:
    task: asyncio.Task[Generation]
    abort_message: str | None = None


def _being_cancelled() -> bool | None:
    """Whether the current task itself is being cancelled (None: unknown before Python 3.11)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    return bool(cancelling()) if cancelling is not None else None


def _json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(obj), status=status, content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    kind = {400: "BadRequest", 404: "NotFound", 503: "ServiceUnavailable"}.get(status, "Error")
    return _json_response({"error": {"message": message, "type": kind, "code": status}}, status)


@web.middleware
async def _json_errors(request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # never a traceback to the client
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _error(500, f"internal server error: {type(exc).__name__}")


class EngineServer:
    """State and handlers of one served engine. `engine=None` means still loading (503s)."""

    def __init__(
        self,
        engine: Engine | None,
        tokenizer: Any,
        *,
        model_path: str,
        tokenizer_path: str | None = None,
        weight_version: str = "default",
        prefix_capacity_tokens: int = 2_000_000,
        tombstone_s: float = 30.0,
    ) -> None:
        self.model_path = model_path
        self.tokenizer_path = tokenizer_path or model_path
        self.weight_version = weight_version
        self.prefix = PrefixTracker(prefix_capacity_tokens)
        self.tombstone_s = tombstone_s
        self._inflight: dict[str, _InFlight] = {}
        self._tombstones: OrderedDict[str, float] = OrderedDict()
        self._background: set[asyncio.Future[Any]] = set()
        self.engine: Engine | None = None
        self.tokenizer: Any = tokenizer
        self._abortable = self._engine_cache = False
        self._supported: frozenset[str] | None = None
        if engine is not None:
            self.attach(engine)

    def attach(self, engine: Engine, tokenizer: Any = None) -> None:
        """Mark the server ready with `engine` (and `tokenizer`, if given)."""
        if tokenizer is not None:
            self.tokenizer = tokenizer
        self.engine = engine
        self._abortable = callable(getattr(engine, "abort", None))
        self._engine_cache = bool(getattr(engine, "reports_cached_tokens", False))
        supported = getattr(engine, "supported_sampling_params", None)
        self._supported = frozenset(supported) if supported is not None else None

    @property
    def ready(self) -> bool:
        return self.engine is not None

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[_json_errors])
        app[SERVER_KEY] = self
        app.router.add_post("/generate", self.handle_generate)
        app.router.add_put("/generate", self.handle_generate)
        app.router.add_post("/abort_request", self.handle_abort)
        app.router.add_get("/health", self.handle_health)
        app.router.add_get("/health_generate", self.handle_health)
        app.router.add_get("/get_model_info", self.handle_model_info)
        app.router.add_get("/get_weight_version", self.handle_weight_version)
        app.router.add_route("*", "/flush_cache", self.handle_flush_cache)
        app.on_shutdown.append(self._on_shutdown)
        return app

    # -- simple endpoints ----------------------------------------------------------------------
    async def handle_health(self, request: web.Request) -> web.Response:
        return web.Response(status=200) if self.ready else _error(503, "model is loading")

    async def handle_model_info(self, request: web.Request) -> web.Response:
        info: dict[str, Any] = {}
        engine_info = getattr(self.engine, "info", None)
        if callable(engine_info):  # extra facts (context_length, vocab_size, ...) from the engine
            info.update(engine_info())
        info.update(
            model_path=self.model_path,
            tokenizer_path=self.tokenizer_path,
            is_generation=True,
            preferred_sampling_params=None,
            weight_version=self.weight_version,
        )
        return _json_response(info)

    async def handle_weight_version(self, request: web.Request) -> web.Response:
        return _json_response({"weight_version": self.weight_version})

    async def handle_flush_cache(self, request: web.Request) -> web.Response:
        self.prefix.clear()
        return web.Response(text="Cache flushed.\n")

    # -- abort ---------------------------------------------------------------------------------
    async def handle_abort(self, request: web.Request) -> web.Response:
        try:
            body = loads(await request.read())
        except ValueError as exc:
            return _error(400, f"invalid JSON: {exc}")
        if not isinstance(body, dict):
            return _error(400, "abort_request body must be a JSON object")
        rid, abort_all = body.get("rid", ""), body.get("abort_all", False)
        if not isinstance(rid, str) or not isinstance(abort_all, bool):
            return _error(400, "abort_request takes {'rid': str, 'abort_all': bool}")
        if abort_all:
            await self.abort_all("aborted by abort_all")
        elif rid in self._inflight:
            await self._abort(rid, "aborted by abort_request")
        elif rid:
            self._remember_abort(rid)
        return web.Response(status=200)

    async def abort_all(self, message: str) -> None:
        for rid in list(self._inflight):
            await self._abort(rid, message)

    async def _abort(self, rid: str, message: str) -> None:
        entry = self._inflight.get(rid)
        if entry is None or entry.abort_message is not None or entry.task.done():
            return
        entry.abort_message = message
        known = False
        if self._abortable:
            try:
                result = self.engine.abort(rid)  # type: ignore[union-attr]
                if inspect.isawaitable(result):
                    result = await result
                known = result is not False
            except Exception:
                log.exception("engine.abort(%r) failed; cancelling the request instead", rid)
        if not known:
            entry.task.cancel()

    def _remember_abort(self, rid: str) -> None:
        now = time.monotonic()
        tomb = self._tombstones
        tomb[rid] = now + self.tombstone_s
        tomb.move_to_end(rid)
        while tomb and (len(tomb) > 10_000 or next(iter(tomb.values())) < now):
            tomb.popitem(last=False)

    def _was_aborted(self, rid: str) -> bool:
        deadline = self._tombstones.pop(rid, None)
        return deadline is not None and deadline >= time.monotonic()

    def _forget(self, rid: str, entry: _InFlight) -> None:
        if self._inflight.get(rid) is entry:
            del self._inflight[rid]

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _on_shutdown(self, app: web.Application) -> None:
        await self.abort_all("server shutting down")

    # -- generate ------------------------------------------------------------------------------
    async def handle_generate(self, request: web.Request) -> web.Response:
        if self.engine is None:
            return _error(503, "model is loading")
        try:
            body = loads(await request.read())
        except ValueError as exc:
            return _error(400, f"invalid JSON: {exc}")
        try:
            req = parse_generate_request(body, self.tokenizer, self._supported)
        except BadRequest as exc:
            return _error(400, str(exc))
        rid = req.rid or uuid.uuid4().hex
        if rid in self._inflight:
            return _error(400, f"duplicate rid {rid!r}: a request with this rid is in flight")
        inputs: list[list[Any]] | None = None
        if req.return_logprob and req.logprob_start_len >= 0:
            scored = await self._input_logprobs(req)
            if isinstance(scored, web.Response):
                return scored
            inputs = scored
        started = time.perf_counter()
        prompt = req.input_ids
        cached = 0 if self._engine_cache else self.prefix.match(prompt)
        if self._was_aborted(rid):
            gen = Generation((), (), FinishReason("abort", message="aborted by abort_request"))
            return self._respond(req, rid, gen, cached, started)
        if not self._engine_cache:
            self.prefix.insert(prompt)
        kwargs: dict[str, Any] = {"session_id": request.headers.get(ROUTING_HEADER)}
        if self._abortable:
            kwargs["rid"] = rid
        task = asyncio.ensure_future(self.engine.generate(prompt, req.sampling_params, **kwargs))
        entry = _InFlight(task)
        self._inflight[rid] = entry
        task.add_done_callback(lambda _t: self._forget(rid, entry))
        try:
            gen = await asyncio.shield(task)
        except asyncio.CancelledError:
            ours = task.cancelled() and entry.abort_message is not None
            cancelling = _being_cancelled()
            if cancelling or (cancelling is None and not ours):
                # the client went away or the server stops: stop the engine's work too
                self._spawn(self._abort(rid, "client disconnected"))
                raise
            if entry.abort_message is None:
                return _error(500, "the engine's generate task was cancelled")
            gen = Generation((), (), FinishReason("abort", message=entry.abort_message))
        except EngineError as exc:
            status = exc.status if exc.status and exc.status >= 400 else (503 if exc.retryable else 500)
            return _error(status, f"engine error: {exc}")
        except ValueError as exc:  # the engine refused these parameters
            return _error(400, str(exc))
        if not self._engine_cache and gen.output_ids:
            self.prefix.insert(prompt + list(gen.output_ids))
        return self._respond(req, rid, gen, cached, started, inputs)

    async def _input_logprobs(self, req: GenerateRequest) -> list[list[Any]] | web.Response:
        """SGLang's `input_token_logprobs` for `logprob_start_len` k: [logprob, id, text] for the
        prompt tokens k+1.. (SGLang skips token k), or from token 0 with a None log-prob first when
        k is 0. Needs an engine with `input_logprobs(ids, params, start)` (the local engine)."""
        score = getattr(self.engine, "input_logprobs", None)
        if not callable(score):
            return _error(400, "logprob_start_len (prompt log-probs) is not supported by this engine")
        ids, k = req.input_ids, req.logprob_start_len
        first = max(k + 1, 1)
        try:
            lps = list(await score(ids, req.sampling_params, first))
        except EngineError as exc:
            status = exc.status if exc.status and exc.status >= 400 else 500
            return _error(status, f"engine error: {exc}")
        if len(lps) != len(ids) - first or not all(map(math.isfinite, lps)):
            return _error(500, "engine returned malformed prompt log-probs")
        text = self.tokenizer.decode if req.return_text_in_logprobs and self.tokenizer is not None else None
        out: list[list[Any]] = [[None, ids[0], text([ids[0]]) if text else None]] if k == 0 else []
        out += [[lp, t, text([t]) if text else None] for lp, t in zip(lps, ids[first:])]
        return out

    def _respond(
        self,
        req: GenerateRequest,
        rid: str,
        gen: Generation,
        cached: int,
        started: float,
        inputs: list[list[Any]] | None = None,
    ) -> web.Response:
        ids, lps = gen.output_ids, gen.logprobs
        if not all(map(math.isfinite, lps)):
            return _error(500, "engine returned a non-finite log-prob")
        n_prompt = len(req.input_ids)
        if self._engine_cache:
            cached = gen.cached_tokens
        else:
            cached = min(cached, max(n_prompt - 1, 0))
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": gen.finish_reason.to_json(),
            "prompt_tokens": n_prompt,
            "completion_tokens": len(ids),
            "cached_tokens": cached,
            "weight_version": self.weight_version,
            "e2e_latency": round(time.perf_counter() - started, 6),
        }
        if req.return_logprob:
            if req.return_text_in_logprobs and self.tokenizer is not None:
                decode = self.tokenizer.decode
                meta["output_token_logprobs"] = [[lp, t, decode([t])] for lp, t in zip(lps, ids)]
            else:
                meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(lps, ids)]
            if inputs is not None:
                meta["input_token_logprobs"] = inputs
        text = gen.text
        if not text and ids and self.tokenizer is not None:
            text = self._decode(ids, req.sampling_params.get("skip_special_tokens", True))
        return _json_response({"text": text, "output_ids": list(ids), "meta_info": meta})

    def _decode(self, ids: tuple[int, ...], skip_special_tokens: bool) -> str:
        try:
            return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        except TypeError:  # a tokenizer without that keyword
            return self.tokenizer.decode(list(ids))


def make_app(engine: Engine | None, tokenizer: Any, *, model_path: str, **options: Any) -> web.Application:
    """The aiohttp app serving `engine` (None: loading until `app[SERVER_KEY].attach(...)`).

    `options`: tokenizer_path, weight_version, prefix_capacity_tokens, tombstone_s (EngineServer).
    """
    return EngineServer(engine, tokenizer, model_path=model_path, **options).build_app()


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve `app` on host:port (0 = any free port) inside this loop; yields the base URL."""
    runner_kwargs: dict[str, Any] = {"access_log": None}
    site_kwargs: dict[str, Any] = {"backlog": 4096}
    if "handler_cancellation" in inspect.signature(web.Server.__init__).parameters:
        runner_kwargs["handler_cancellation"] = True  # aiohttp >= 3.9: cancel on disconnect
    if "shutdown_timeout" in inspect.signature(web.BaseRunner.__init__).parameters:
        runner_kwargs["shutdown_timeout"] = 5.0  # aiohttp >= 3.9
    else:  # pragma: no cover - aiohttp 3.8
        site_kwargs["shutdown_timeout"] = 5.0
    runner = web.AppRunner(app, **runner_kwargs)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, **site_kwargs)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        shown = f"[{host}]" if ":" in host else host
        yield f"http://{shown}:{bound}"
    finally:
        await runner.cleanup()


async def run_server(
    engine: Engine | None,
    tokenizer: Any,
    host: str = "127.0.0.1",
    port: int = 30000,
    ready_event: asyncio.Event | None = None,
    *,
    model_path: str | None = None,
    on_ready: Callable[[str], None] | None = None,
    app: web.Application | None = None,
    **options: Any,
) -> None:
    """Serve until cancelled. `ready_event` is set (and `on_ready(url)` called) once listening."""
    if app is None:
        name = model_path or str(getattr(engine, "model_path", None) or "graphrl-local")
        app = make_app(engine, tokenizer, model_path=name, **options)
    async with serving(app, host, port) as url:
        if ready_event is not None:
            ready_event.set()
        if on_ready is not None:
            on_ready(url)
        await asyncio.Event().wait()
