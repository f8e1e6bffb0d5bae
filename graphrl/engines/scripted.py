"""A test double for unit tests ONLY: an Engine that replays scripted outputs.

Input: a list of scripted outputs, replayed in call order (each a `Scripted`, a text -- encoded
with the given tokenizer --, a list of token ids, or a ready `Generation`), or a callable
`(input_ids, sampling_params, call_index) -> one of those`.
Output: `Generation`s, and a record of every request received (`requests`).

Invariants: no model runs; nothing is sampled; a scripted output longer than the request's
`max_new_tokens` is cut there and finishes with "length" (as a real engine would), otherwise the
finish reason is the scripted one or, by default, "stop" on the last token (matched = that id);
log-probs default to `default_logprob` per token; running out of script raises `EngineError`.
Never use this to serve real rollouts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from graphrl.engines.base import EngineError, FinishReason, Generation


@dataclass(frozen=True)
class Scripted:
    """One scripted reply: ids (or text to encode), optional finish reason, log-probs, cache hits."""

    output_ids: tuple[int, ...] | None = None
    text: str | None = None
    finish_reason: FinishReason | None = None
    logprobs: tuple[float, ...] | None = None
    cached_tokens: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict)  # extra meta (weight_version, spec counters)

    def __post_init__(self) -> None:
        if (self.output_ids is None) == (self.text is None):
            raise ValueError("give exactly one of output_ids and text")


@dataclass(frozen=True)
class ScriptedRequest:
    """What the engine received on one call."""

    call_index: int
    input_ids: tuple[int, ...]
    sampling_params: Mapping[str, Any]
    session_id: str | None = None
    rid: str | None = None


ScriptItem = Union[Scripted, Generation, str, Sequence[int]]
Script = Union[Sequence[ScriptItem], Callable[[Sequence[int], Mapping[str, Any], int], ScriptItem]]


@dataclass
class ScriptedEngineForTests:
    """Replays `script` (see the module docstring). For unit tests only."""

    script: Script
    tokenizer: Any = None
    default_logprob: float = -1.0
    delay_s: float = 0.0
    requests: list[ScriptedRequest] = field(default_factory=list)
    closed: bool = False

    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        *,
        session_id: str | None = None,
        rid: str | None = None,
    ) -> Generation:
        if self.closed:
            raise EngineError("scripted engine is closed")
        index = len(self.requests)
        ids = tuple(int(t) for t in input_ids)
        params = dict(sampling_params or {})
        self.requests.append(ScriptedRequest(index, ids, params, session_id, rid))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if callable(self.script):
            item = self.script(ids, params, index)
        elif index < len(self.script):
            item = self.script[index]
        else:
            raise EngineError(f"scripted engine: no scripted output for call {index}")
        return self._to_generation(item, ids, params)

    async def close(self) -> None:
        self.closed = True

    def _to_generation(self, item: ScriptItem, ids: tuple[int, ...], params: Mapping[str, Any]) -> Generation:
        if isinstance(item, Generation):
            return item
        if isinstance(item, str):
            item = Scripted(text=item)
        elif not isinstance(item, Scripted):
            item = Scripted(output_ids=tuple(int(t) for t in item))
        if item.output_ids is not None:
            out = list(item.output_ids)
        else:
            if self.tokenizer is None:
                raise EngineError("scripted engine: a text output needs a tokenizer")
            out = list(self.tokenizer.encode(item.text, add_special_tokens=False))
        logprobs = list(item.logprobs) if item.logprobs is not None else [self.default_logprob] * len(out)
        if len(logprobs) != len(out):
            raise ValueError(f"scripted output has {len(out)} tokens but {len(logprobs)} log-probs")
        finish = item.finish_reason
        limit = params.get("max_new_tokens")
        if isinstance(limit, int) and len(out) > limit:
            out, logprobs = out[:limit], logprobs[:limit]
            finish = FinishReason("length", matched=limit)
        elif finish is None:
            finish = FinishReason("stop", matched=out[-1] if out else None)
        text = item.text if item.text is not None and finish.type != "length" else self._decode(out)
        return Generation(
            output_ids=tuple(out),
            logprobs=tuple(logprobs),
            finish_reason=finish,
            text=text,
            prompt_tokens=len(ids),
            cached_tokens=item.cached_tokens,
            meta={"scripted": True, **item.meta},
        )

    def _decode(self, out: list[int]) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(out, skip_special_tokens=False)
