"""The embedded engine: a transformers causal LM run in-process (CPU, or CUDA when available).

Input: prompt token ids and SGLang sampling params (see engines/sampling.py), optionally a request id
`rid` that `abort(rid)` can cancel.
Output: a `Generation`: the sampled ids, the log-prob of each under SGLang's reporting rule
(sampling.py: log softmax(logits / temperature) before top-k/top-p; greedy: log softmax(logits)),
finish reason (stop with the matched token id or stop string / length / abort with partial tokens),
prompt_tokens, cached_tokens, and `text` decoded from the ids (stop-trimmed unless no_stop_trim).

Invariants:
  * output ids are never trimmed or re-tokenised; only `text` is trimmed.
  * decoding is incremental with the model's KV cache (one forward per new token), and a prefix
    cache (prefix_cache.py) reuses the KV of the longest common prefix with recent sequences;
    `cached_tokens` says how many prompt tokens were reused.
  * requests run one at a time, in arrival order, on one worker thread (the event loop is never
    blocked). That thread uses `num_threads` torch intra-op threads (default 1: decode steps are
    small ops, and on a busy CPU two threads measured ~10x slower than one); each request has its own `torch.Generator` (seeded by `sampling_seed`, else from this
    engine's own RNG), so a seeded request gives the same tokens whatever ran before it.
  * cancellation: `abort(rid)`, or cancelling the awaiting task, sets a flag checked before each
    token; the request then finishes with type "abort" and the tokens sampled so far.
  * structured output (`regex` / `json_schema`, engines/grammar.py): before each step the tokens
    the pattern does not allow next are set to -inf, so log-probs are those of the masked
    distribution (SGLang masks the logits the same way before sampling).
  * `input_logprobs` scores given ids (prompt log-probs for SGLang's `logprob_start_len`) with the
    same reporting rule, in one forward pass on the same worker thread.
  * model-side outcomes are Generations; bad requests (unknown sampling params, ids out of range,
    prompt longer than the context) raise `EngineError(status=400)`.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from graphrl.engines.base import EngineError, FinishReason, Generation
from graphrl.engines.grammar import Grammars
from graphrl.engines.prefix_cache import PrefixCache
from graphrl.engines.sampling import LOGPROB_MODES, SamplingParams, sample_next
from graphrl.models.errors import require


@dataclass(frozen=True)
class _Request:
    rid: str
    aborted: threading.Event = field(default_factory=threading.Event)


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    sources = [getattr(tokenizer, "eos_token_id", None), getattr(model.config, "eos_token_id", None)]
    gen_config = getattr(model, "generation_config", None)
    if gen_config is not None:
        sources.append(getattr(gen_config, "eos_token_id", None))
    for value in sources:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


class LocalEngine:
    """An `Engine` over an in-process Hugging Face causal LM (see the module docstring)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: str | None = None,
        seed: int | None = None,
        logprob_mode: str = "sampling",
        prefix_cache_entries: int = 4,
        prefix_cache_tokens: int = 65536,
        context_length: int | None = None,
        num_threads: int | None = 1,
        name: str = "local",
    ):
        torch = require("torch", "the local engine")
        if logprob_mode not in LOGPROB_MODES:
            raise ValueError(f"logprob_mode must be one of {LOGPROB_MODES}, got {logprob_mode!r}")
        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.logprob_mode = logprob_mode
        self.vocab_size = int(model.config.vocab_size)
        self.context_length = int(context_length or getattr(model.config, "max_position_embeddings", 0) or 32768)
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self._rng = random.Random(seed)
        self._prefix = PrefixCache(prefix_cache_entries, prefix_cache_tokens)
        self._grammars = Grammars(tokenizer)
        self._requests: dict[str, _Request] = {}
        # torch's intra-op thread count is per thread (OpenMP builds): this changes the worker only.
        init = (lambda: torch.set_num_threads(num_threads)) if num_threads else None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"graphrl-{name}", initializer=init)
        self._closed = False
        params = inspect.signature(model.forward).parameters
        self._keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        # the KV cache argument and output field: `cache` from transformers 5.x, `past_key_values` before
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    # ----------------------------------------------------------------- protocol
    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        *,
        session_id: str | None = None,
        rid: str | None = None,
    ) -> Generation:
        """Generate a continuation. `session_id` is accepted for the protocol (one worker: unused)."""
        ids, params = self._validate(input_ids, sampling_params)
        req = self._register(rid)
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._run, ids, params, req)
        except asyncio.CancelledError:
            req.aborted.set()
            raise
        finally:
            self._requests.pop(req.rid, None)

    def generate_sync(
        self, input_ids: Sequence[int], sampling_params: Mapping[str, Any], *, rid: str | None = None
    ) -> Generation:
        """Blocking variant for scripts and benchmarks (same worker thread, same ordering)."""
        ids, params = self._validate(input_ids, sampling_params)
        req = self._register(rid)
        try:
            return self._executor.submit(self._run, ids, params, req).result()
        finally:
            self._requests.pop(req.rid, None)

    async def input_logprobs(
        self, input_ids: Sequence[int], sampling_params: Mapping[str, Any], start: int = 1
    ) -> tuple[float, ...]:
        """log p(ids[i] | ids[:i]) for i in start..len(ids)-1 under the reporting rule of `generate`
        (sampling mode: log softmax(logits / temperature); greedy or "original": log softmax(logits)),
        from one forward pass over the ids (the server's `input_token_logprobs`)."""
        ids, params = self._validate(input_ids, sampling_params)
        if not 1 <= start <= len(ids):
            raise EngineError(f"start must be in [1, {len(ids)}], got {start}", status=400)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._score, ids, params, start)

    def _score(self, ids: list[int], p: SamplingParams, start: int) -> tuple[float, ...]:
        torch = self._torch
        if start >= len(ids):
            return ()
        try:
            with torch.inference_mode():
                x = torch.tensor([ids], dtype=torch.long, device=self.device)
                logits = self.model(input_ids=x, use_cache=False).logits[0, start - 1 : len(ids) - 1].float()
                if not (p.greedy or self.logprob_mode == "original") and p.temperature != 1.0:
                    logits = logits / p.temperature
                lps = torch.log_softmax(logits, dim=-1)
                picked = lps.gather(1, torch.tensor(ids[start:], device=self.device).unsqueeze(1)).squeeze(1)
        except Exception as exc:  # a fault of the engine itself
            raise EngineError(f"local engine failed: {type(exc).__name__}: {exc}") from exc
        return tuple(float(v) for v in picked.tolist())

    def abort(self, rid: str | None = None) -> bool:
        """Abort request `rid` (all requests when None). True if something was running or queued."""
        targets = list(self._requests.values()) if rid is None else [self._requests.get(rid)]
        hit = False
        for req in targets:
            if req is not None:
                req.aborted.set()
                hit = True
        return hit

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.abort()
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        self._prefix.clear()

    def info(self) -> dict[str, Any]:
        """Facts for a server's /get_model_info."""
        return {
            "model_path": getattr(self.model.config, "_name_or_path", "") or self.name,
            "tokenizer_path": getattr(self.tokenizer, "name_or_path", ""),
            "is_generation": True,
            "context_length": self.context_length,
            "vocab_size": self.vocab_size,
            "device": self.device,
            "logprob_mode": self.logprob_mode,
        }

    # ----------------------------------------------------------------- internals
    def _validate(self, input_ids: Sequence[int], sampling_params: Mapping[str, Any]):
        if self._closed:
            raise EngineError("local engine is closed")
        try:
            params = SamplingParams.from_mapping(sampling_params)
        except (TypeError, ValueError) as exc:
            raise EngineError(f"bad sampling params: {exc}", status=400) from exc
        ids = [int(t) for t in input_ids]
        if not ids:
            raise EngineError("input_ids is empty", status=400)
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise EngineError(f"token ids out of range [0, {self.vocab_size}): {bad[:5]}", status=400)
        if len(ids) >= self.context_length:
            raise EngineError(
                f"the input ({len(ids)} tokens) is longer than the context length ({self.context_length} tokens)",
                status=400,
            )
        return ids, params

    def _register(self, rid: str | None) -> _Request:
        rid = rid or uuid.uuid4().hex
        if rid in self._requests:
            raise EngineError(f"a request with rid {rid!r} is already running", status=400)
        req = _Request(rid)
        self._requests[rid] = req
        return req

    def _forward(self, ids: Sequence[int], kv: Any):
        x = self._torch.tensor([list(ids)], dtype=self._torch.long, device=self.device)
        kwargs: dict[str, Any] = {"input_ids": x, self._cache_kw: kv, "use_cache": True}
        if self._keep_kw:
            kwargs[self._keep_kw] = 1
        out = self.model(**kwargs)
        return out.logits[0, -1].float(), getattr(out, self._cache_kw)

    def _run(self, ids: list[int], p: SamplingParams, req: _Request) -> Generation:
        started = time.perf_counter()
        if req.aborted.is_set():  # aborted while queued: nothing was computed
            return self._finish(req, p, [], [], FinishReason("abort", message="aborted"), 0, 0, started)
        torch = self._torch
        stop_ids = set(p.stop_token_ids) | (set() if p.ignore_eos else set(self.eos_token_ids))
        stop_ids = {t for t in stop_ids if 0 <= t < self.vocab_size}
        budget = min(p.max_new_tokens, self.context_length - len(ids))
        seed = p.sampling_seed if p.sampling_seed is not None else self._rng.getrandbits(63)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        window = 4 * max((len(s) for s in p.stop), default=0) + 4
        out: list[int] = []
        logprobs: list[float] = []
        finish: FinishReason | None = None
        grammar = self._constraint(p)
        try:
            kv, cached = self._prefix.take(ids)
            with torch.inference_mode():
                logits, kv = self._forward(ids[cached:], kv)
                fed = list(ids)
                while finish is None:
                    if req.aborted.is_set():
                        finish = FinishReason("abort", message="aborted")
                        break
                    if len(out) >= budget:
                        finish = FinishReason("length", matched=len(out))
                        break
                    if len(out) < p.min_new_tokens and stop_ids:
                        logits = logits.clone()
                        logits[sorted(stop_ids)] = float("-inf")
                    if grammar is not None:
                        logits = grammar.mask(logits)
                    token, lp = sample_next(logits, p, gen, logprob_mode=self.logprob_mode)
                    if grammar is not None and token not in stop_ids:
                        grammar.advance(token)
                    out.append(token)
                    logprobs.append(lp)
                    finish = self._stop_check(out, p, stop_ids, window)
                    if finish is None and len(out) >= budget:
                        finish = FinishReason("length", matched=len(out))
                    if finish is None:
                        logits, kv = self._forward([token], kv)
                        fed.append(token)
            self._prefix.put(fed, kv)
        except EngineError:
            raise
        except Exception as exc:  # a fault of the engine itself, not a model outcome
            raise EngineError(f"local engine failed: {type(exc).__name__}: {exc}") from exc
        return self._finish(req, p, out, logprobs, finish, len(ids), cached, started)

    def _constraint(self, p: SamplingParams):
        """The request's structured-output automaton (engines/grammar.py), or None; a pattern the
        library rejects is a bad request (400)."""
        if p.regex is None and p.json_schema is None:
            return None
        try:
            return self._grammars.constraint(regex=p.regex, json_schema=p.json_schema)
        except ValueError as exc:
            raise EngineError(str(exc), status=400) from None
        except ImportError as exc:  # MissingDependency: its message names the install command
            raise EngineError(str(exc), status=400) from None

    def _stop_check(self, out: list[int], p: SamplingParams, stop_ids: set[int], window: int) -> FinishReason | None:
        if len(out) < p.min_new_tokens:
            return None
        if out[-1] in stop_ids:
            return FinishReason("stop", matched=out[-1])
        if p.stop:
            tail = self.tokenizer.decode(out[-window:], skip_special_tokens=False)
            for s in p.stop:
                if s in tail:
                    return FinishReason("stop", matched=s)
        return None

    def _finish(
        self,
        req: _Request,
        p: SamplingParams,
        out: list[int],
        logprobs: list[float],
        finish: FinishReason,
        prompt_tokens: int,
        cached: int,
        started: float,
    ) -> Generation:
        text_ids = out
        if finish.type == "stop" and isinstance(finish.matched, int) and not p.no_stop_trim:
            text_ids = out[:-1]
        text = self.tokenizer.decode(text_ids, skip_special_tokens=p.skip_special_tokens)
        if finish.type == "stop" and isinstance(finish.matched, str) and not p.no_stop_trim:
            at = text.find(finish.matched)
            if at >= 0:
                text = text[:at]
        return Generation(
            output_ids=tuple(out),
            logprobs=tuple(logprobs),
            finish_reason=finish,
            text=text,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            meta={
                "id": req.rid,
                "completion_tokens": len(out),
                "e2e_latency": time.perf_counter() - started,
            },
        )
