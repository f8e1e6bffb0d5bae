"""SGLang HTTP client: (input ids, sampling params) -> `Generation`, over SGLang's native `/generate`.

Input: prompt token ids, SGLang sampling params (`sampling_seed` travels inside them, as SGLang
expects), an optional session id. Output: a `Generation` whose ids and log-probs are read from
`meta_info.output_token_logprobs` ([logprob, token_id, text]), the engine's ground truth.

Wire (docs/architecture.md, slime contract §4): `POST {url}/generate` with `input_ids`, `sampling_params`,
`return_logprob: true` and a fresh `rid`; header `X-SMG-Routing-Key: <session_id>` when a session id
is given, so consistent-hashing routers keep a conversation on one worker (prefix-cache hits).
`token_logprobs` (a teacher scoring given tokens) is the same call with `max_new_tokens: 0` and
`logprob_start_len`, read from `meta_info.input_token_logprobs`.

Invariants:
- ids and log-probs are never repaired: a malformed entry, a non-finite or missing log-prob, or an
  `output_ids` list that disagrees with the log-prob ids is an `EngineError(retryable=False)`.
- Retry policy: only failures to *connect* (refused, reset during connect, DNS, connect timeout) are
  retried, at most `max_retries` times with exponential backoff (`backoff_s * 2**k`, capped at
  `max_backoff_s`): no byte of the request reached a server, so nothing can have been generated.
  Nothing is retried once the request may have been sent (timeouts, disconnects, any HTTP status).
  HTTP 4xx -> EngineError(retryable=False). HTTP 503 -> EngineError(retryable=True) but NOT retried
  here by default: SGLang answers 503 both before processing (starting up, shutting down, a router
  with no live worker) and for scheduler-initiated aborts of admitted requests, and the client cannot
  tell them apart; pass `retry_on_503=True` to retry it within the same bounded budget (useful behind
  a router while workers start). Other 5xx -> EngineError(retryable=False).
- A request that times out or whose awaiting task is cancelled gets a best-effort
  `POST /abort_request {"rid": rid}` (fire-and-forget); cancellation is always re-raised.
- One `aiohttp.ClientSession` per event loop (`LoopSessions`), created lazily inside the running
  loop with a connection pool sized for high concurrency, and closed when that loop shuts down (or
  by `close()`); a session passed in is used and never closed.
"""

from __future__ import annotations

import asyncio
import math
import operator
import os
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from graphrl.engines._json import dumps, loads
from graphrl.engines.base import ROUTING_HEADER, EngineError, FinishReason, Generation
from graphrl.engines.loop_sessions import LoopSessions

__all__ = ["SGLangEngine", "parse_generate_response", "ROUTING_HEADER", "SPEC_COUNTERS"]

_FINISH_TYPES = frozenset(("stop", "length", "abort"))
# speculative-decoding counters SGLang's meta_info carries when it runs a draft model
SPEC_COUNTERS = ("spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_INT_ONLY = {int}
_NUMBER_TYPES = {float, int}
# Connect-phase failures: no request byte was written. SSL/certificate failures are not transient.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientConnectorError,)
_CONNECT_TIMEOUT = getattr(aiohttp, "ConnectionTimeoutError", None)  # aiohttp >= 3.10
if _CONNECT_TIMEOUT is not None:
    _CONNECT_ERRORS += (_CONNECT_TIMEOUT,)
_NOT_TRANSIENT = tuple(t for t in (getattr(aiohttp, "ClientSSLError", None),) if t is not None)


def _finish_reason(raw: Any) -> FinishReason:
    if isinstance(raw, dict):
        kind = raw.get("type")
        if kind == "stop":
            return FinishReason("stop", matched=raw.get("matched"))
        if kind == "length":
            return FinishReason("length", matched=raw.get("length"))
        if kind == "abort":
            msg = raw.get("message")
            return FinishReason("abort", message=None if msg is None else str(msg))
    elif isinstance(raw, str) and raw in _FINISH_TYPES:  # older servers: a bare string
        return FinishReason(raw)
    raise EngineError(f"unknown finish_reason in SGLang response: {raw!r}")


def parse_generate_response(body: Any, *, rid: str | None = None) -> Generation:
    """Turn a decoded `/generate` response into a `Generation` (raises `EngineError` if malformed)."""
    if not isinstance(body, dict) or not isinstance(body.get("meta_info"), dict):
        raise EngineError(f"SGLang response has no meta_info object: {str(body)[:200]!r}")
    meta = body["meta_info"]
    finish = _finish_reason(meta.get("finish_reason"))
    entries = meta.get("output_token_logprobs")
    output_ids = body.get("output_ids")
    if entries is None:
        # Aborted in the queue: SGLang may omit every per-token field. Anything else lacks log-probs.
        if output_ids or meta.get("completion_tokens"):
            raise EngineError("SGLang response has tokens but no output_token_logprobs")
        entries = ()
    elif not isinstance(entries, list):
        raise EngineError("output_token_logprobs is not a list")
    try:  # C-level passes over the entries; every check below is on the whole column
        ids = tuple(map(_SECOND, entries))
        logprobs = tuple(map(_FIRST, entries))
    except (TypeError, KeyError, IndexError) as exc:  # an entry that is not [logprob, id, ...]
        raise EngineError(f"malformed output_token_logprobs: {exc!r}") from None
    if ids:
        id_types, lp_types = set(map(type, ids)), set(map(type, logprobs))
        if id_types != _INT_ONLY or not lp_types <= _NUMBER_TYPES:
            raise EngineError(
                f"malformed output_token_logprobs: id types {sorted(t.__name__ for t in id_types)},"
                f" log-prob types {sorted(t.__name__ for t in lp_types)}"
            )
        if not all(map(math.isfinite, logprobs)):
            raise EngineError("output_token_logprobs holds a non-finite log-prob")
        if int in lp_types:
            logprobs = tuple(map(float, logprobs))
    if output_ids is not None and (
        type(output_ids) is not list or len(output_ids) != len(ids) or tuple(output_ids) != ids
    ):
        raise EngineError(
            f"output_ids ({len(output_ids) if isinstance(output_ids, list) else output_ids!r}) "
            f"disagree with output_token_logprobs ({len(ids)} tokens); refusing to guess"
        )
    completion = meta.get("completion_tokens")
    if (
        completion is not None and completion != len(ids) and not (finish.type == "abort" and not ids)
    ):  # a request aborted in the queue may report none
        raise EngineError(
            f"completion_tokens ({completion!r}) disagrees with output_token_logprobs "
            f"({len(ids)} tokens); refusing to guess"
        )
    text = body.get("text")
    return Generation(
        output_ids=ids,
        logprobs=logprobs,
        finish_reason=finish,
        text=text if isinstance(text, str) else "",
        prompt_tokens=meta.get("prompt_tokens") or 0,
        cached_tokens=meta.get("cached_tokens") or 0,
        meta={
            "rid": rid,
            "id": meta.get("id"),
            "weight_version": meta.get("weight_version"),
            **{k: meta[k] for k in SPEC_COUNTERS if isinstance(meta.get(k), int)},
        },
    )


def _normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else "http://" + url


class SGLangEngine:
    """The Engine protocol over an SGLang server or router (or graphrl's own `graphrl serve`)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 900.0,
        max_retries: int = 5,
        backoff_s: float = 0.25,
        max_backoff_s: float = 8.0,
        connect_timeout_s: float = 10.0,
        retry_on_503: bool = False,
        max_connections: int = 1024,
        keepalive_s: float = 4.0,
        abort_timeout_s: float = 5.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if max_retries < 0 or backoff_s < 0 or timeout_s <= 0:
            raise ValueError("need max_retries >= 0, backoff_s >= 0 and timeout_s > 0")
        self.url = _normalize_url(url)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retry_on_503 = retry_on_503
        self.timeout_s = timeout_s
        self._generate_url = self.url + "/generate"
        self._abort_url = self.url + "/abort_request"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self._short_timeout = aiohttp.ClientTimeout(
            total=abort_timeout_s, sock_connect=min(connect_timeout_s, abort_timeout_s)
        )
        self._headers = {"Content-Type": "application/json"}
        self._max_connections = max_connections
        # keep-alive shorter than uvicorn's 5 s default, so a pooled socket the server has just
        # closed is not picked for a POST (which could not be retried safely).
        self._keepalive_s = keepalive_s
        self._external = session
        self._sessions = LoopSessions(self._new_session)  # one per event loop, closed with its loop
        self._background: set[asyncio.Task[Any]] = set()

    def __repr__(self) -> str:
        return f"SGLangEngine({self.url!r})"

    # -- session -------------------------------------------------------------------------------
    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=self._max_connections,
            keepalive_timeout=self._keepalive_s,
            ttl_dns_cache=300,
        )
        return aiohttp.ClientSession(connector=connector, timeout=self._timeout)

    async def _client(self) -> aiohttp.ClientSession:
        if self._external is not None:
            return self._external
        return await self._sessions.get()

    async def close(self) -> None:
        """Wait briefly for pending best-effort aborts, then close this loop's session (if it owns one)."""
        loop = asyncio.get_running_loop()
        pending = [t for t in self._background if not t.done() and t.get_loop() is loop]
        if pending:
            await asyncio.wait(pending, timeout=self._short_timeout.total)
        await self._sessions.close()

    async def __aenter__(self) -> SGLangEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- generate ------------------------------------------------------------------------------
    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        *,
        session_id: str | None = None,
        rid: str | None = None,
    ) -> Generation:
        """One `/generate` call; see the module docstring for retries, timeouts and cancellation."""
        rid = rid or os.urandom(16).hex()  # unique per request (uuid4 builds an object for the same bytes)
        if not isinstance(input_ids, (list, tuple)):
            input_ids = list(input_ids)
        if type(sampling_params) is not dict:
            sampling_params = dict(sampling_params)
        body = {"input_ids": input_ids, "sampling_params": sampling_params, "return_logprob": True, "rid": rid}
        return self._parse(await self._post_generate(body, rid, session_id), rid)

    async def token_logprobs(
        self,
        input_ids: Sequence[int],
        start: int,
        sampling_params: Mapping[str, Any],
        *,
        session_id: str | None = None,
    ) -> tuple[float, ...]:
        """Score `input_ids[start:]` (engines.base.ScoresTokens): one `/generate` with
        `max_new_tokens: 0`, `return_logprob` and `logprob_start_len: start - 1`. SGLang's
        `input_token_logprobs` then covers tokens start..end ([logprob, id, text] each; with
        logprob_start_len 0 a `None` entry for token 0 comes first); the last `len - start` entries
        are taken and their ids must be exactly `input_ids[start:]` (else EngineError, never a guess)."""
        ids = [int(t) for t in input_ids]
        if not 1 <= start <= len(ids):
            raise ValueError(f"start must be in [1, {len(ids)}], got {start}")
        rid = os.urandom(16).hex()
        params = {**dict(sampling_params), "max_new_tokens": 0}
        body = {
            "input_ids": ids,
            "sampling_params": params,
            "return_logprob": True,
            "logprob_start_len": start - 1,
            "rid": rid,
        }
        payload = await self._post_generate(body, rid, session_id)
        try:
            reply = loads(payload)
        except ValueError as exc:
            raise EngineError(f"SGLang /generate returned invalid JSON: {exc}") from None
        meta = reply.get("meta_info") if isinstance(reply, dict) else None
        entries = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
        want = ids[start:]
        if not isinstance(entries, list) or len(entries) < len(want):
            got = len(entries) if isinstance(entries, list) else entries
            raise EngineError(
                f"SGLang {self._generate_url} returned {got!r} input_token_logprobs for {len(want)} scored tokens"
            )
        tail = entries[len(entries) - len(want) :]
        try:
            got_ids = [e[1] for e in tail]
            raw = [e[0] for e in tail]
        except (TypeError, KeyError, IndexError) as exc:
            raise EngineError(f"malformed input_token_logprobs: {exc!r}") from None
        if not set(map(type, raw)) <= _NUMBER_TYPES or not set(map(type, got_ids)) <= _INT_ONLY:
            raise EngineError("malformed input_token_logprobs: log-probs must be numbers and ids ints")
        logprobs = tuple(map(float, raw))
        if got_ids != want:
            raise EngineError(
                "input_token_logprobs are not for the tokens sent (ids differ): refusing to guess the alignment"
            )
        if not all(map(math.isfinite, logprobs)):
            raise EngineError("input_token_logprobs holds a non-finite log-prob")
        return logprobs

    async def _post_generate(self, body_obj: dict[str, Any], rid: str, session_id: str | None) -> bytes:
        """POST one `/generate` body; the reply's bytes on HTTP 200 (retries, aborts: module docstring)."""
        body = dumps(body_obj)
        headers = self._headers
        if session_id is not None:
            headers = {**headers, ROUTING_HEADER: str(session_id)}
        session = await self._client()
        attempt = 0
        while True:
            in_flight = True
            try:
                async with session.post(self._generate_url, data=body, headers=headers, timeout=self._timeout) as resp:
                    status = resp.status
                    payload = await resp.read()
                in_flight = False
                if status == 200:
                    return payload
                error = self._status_error(status, payload)
                if not (status == 503 and self.retry_on_503):
                    raise error
            except asyncio.CancelledError:
                if in_flight:
                    self._abort_in_background(rid)
                raise
            except _CONNECT_ERRORS as exc:
                if isinstance(exc, _NOT_TRANSIENT):
                    raise EngineError(f"cannot connect to {self.url}: {exc}") from exc
                error = EngineError(
                    f"cannot connect to {self.url} after {attempt + 1} attempt(s): {exc}",
                    retryable=True,
                )
            except asyncio.TimeoutError as exc:
                self._abort_in_background(rid)
                raise EngineError(f"SGLang /generate timed out after {self.timeout_s:g}s (rid {rid})") from exc
            except aiohttp.ClientError as exc:
                self._abort_in_background(rid)
                raise EngineError(
                    f"SGLang /generate failed after the request was sent (rid {rid}): {type(exc).__name__}: {exc}"
                ) from exc
            if attempt >= self.max_retries:
                raise error
            await asyncio.sleep(min(self.backoff_s * (2**attempt), self.max_backoff_s))
            attempt += 1

    @staticmethod
    def _parse(payload: bytes, rid: str) -> Generation:
        try:
            body = loads(payload)
        except ValueError as exc:
            raise EngineError(f"SGLang /generate returned invalid JSON: {exc}") from None
        return parse_generate_response(body, rid=rid)

    def _status_error(self, status: int, payload: bytes) -> EngineError:
        detail = payload[:500].decode("utf-8", "replace")
        return EngineError(
            f"SGLang {self._generate_url} answered HTTP {status}: {detail}",
            retryable=status == 503,
            status=status,
        )

    # -- abort ---------------------------------------------------------------------------------
    def _abort_in_background(self, rid: str) -> None:
        try:
            task = asyncio.get_running_loop().create_task(self._abort_quietly(rid))
        except RuntimeError:  # loop closing
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _abort_quietly(self, rid: str) -> None:
        try:
            await self._post_abort({"rid": rid})
        except (EngineError, asyncio.CancelledError):
            pass

    async def _post_abort(self, body: dict[str, Any]) -> None:
        try:
            async with (await self._client()).post(
                self._abort_url,
                data=dumps(body),
                headers=self._headers,
                timeout=self._short_timeout,
            ) as resp:
                if resp.status != 200:
                    text = (await resp.read())[:300].decode("utf-8", "replace")
                    raise EngineError(f"abort_request: HTTP {resp.status}: {text}", status=resp.status)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise EngineError(f"abort_request to {self.url} failed: {exc}") from exc

    async def abort(self, rid: str) -> None:
        """Abort one request by rid (`POST /abort_request {"rid": rid}`)."""
        await self._post_abort({"rid": rid})

    async def abort_all(self) -> None:
        """Abort every request on the server (`POST /abort_request {"rid": "", "abort_all": true}`)."""
        await self._post_abort({"rid": "", "abort_all": True})

    # -- helpers -------------------------------------------------------------------------------
    async def health(self) -> bool:
        """True when `GET /health` answers 200; False on any other status or transport error."""
        try:
            async with (await self._client()).get(self.url + "/health", timeout=self._short_timeout) as r:
                await r.read()
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def wait_until_healthy(self, timeout_s: float = 120.0, poll_s: float = 0.25) -> None:
        """Poll `/health` until it answers 200; EngineError after `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not await self.health():
            if loop.time() >= deadline:
                raise EngineError(f"{self.url} not healthy after {timeout_s:g}s", retryable=True)
            await asyncio.sleep(poll_s)

    async def model_info(self) -> dict[str, Any]:
        """`GET /get_model_info` (model_path, tokenizer_path, is_generation, ...)."""
        try:
            async with (await self._client()).get(self.url + "/get_model_info", timeout=self._short_timeout) as r:
                payload = await r.read()
                status = r.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise EngineError(f"get_model_info from {self.url} failed: {exc}") from exc
        if status != 200:
            raise EngineError(f"get_model_info: HTTP {status}", status=status)
        try:
            info = loads(payload)
        except ValueError as exc:
            raise EngineError(f"get_model_info returned invalid JSON: {exc}") from None
        if not isinstance(info, dict):
            raise EngineError("get_model_info did not return a JSON object")
        return info
