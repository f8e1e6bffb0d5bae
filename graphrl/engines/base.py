"""The Engine protocol: token ids in -> token ids, log-probs, finish reason out.

Input: prompt token ids and sampling parameters (SGLang names: max_new_tokens, temperature, top_p,
top_k, stop, stop_token_ids, sampling_seed, ...).
Output: a `Generation` whose `output_ids` and `logprobs` are exactly what the model sampled
(ground truth for training; `text` is a convenience only).

Invariants: len(output_ids) == len(logprobs); finish_reason.type is one of "stop", "length",
"abort"; engines never raise for model-side outcomes (an abort is a Generation), they raise
`EngineError` for transport/server faults.

`ScoresTokens` is an optional extension (a teacher model scoring a sample's tokens for on-policy
distillation): the log-prob of each given token after the ones before it, nothing generated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# HTTP header naming a session (consistent-hashing routers keep a session's calls on one worker)
ROUTING_HEADER = "X-SMG-Routing-Key"


@dataclass(frozen=True)
class FinishReason:
    type: str  # "stop" | "length" | "abort"
    matched: int | str | None = None  # stop token id or stop string (type == "stop")
    message: str | None = None  # abort message

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "stop":
            out["matched"] = self.matched
        elif self.type == "length":
            out["length"] = self.matched
        elif self.type == "abort":
            out["message"] = self.message
        return out


@dataclass(frozen=True)
class Generation:
    output_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    text: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.output_ids) != len(self.logprobs):
            raise ValueError(f"engine returned {len(self.output_ids)} tokens but {len(self.logprobs)} log-probs")


class EngineError(RuntimeError):
    """A transport or server fault (not a model outcome). `retryable` says if a retry is safe."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


@runtime_checkable
class Engine(Protocol):
    """What the runtime needs from a model endpoint."""

    async def generate(
        self,
        input_ids: Sequence[int],
        sampling_params: Mapping[str, Any],
        *,
        session_id: str | None = None,
    ) -> Generation: ...

    async def close(self) -> None: ...


@runtime_checkable
class ScoresTokens(Protocol):
    """Optional Engine extension: score given tokens instead of generating.

    `token_logprobs(ids, start, params)` returns `len(ids) - start` log-probs, entry j being
    log p(ids[start + j] | ids[:start + j]) under the engine's reporting rule for `params`
    (temperature); `1 <= start <= len(ids)`. Faults raise `EngineError`, as `generate` does.
    """

    async def token_logprobs(
        self,
        input_ids: Sequence[int],
        start: int,
        sampling_params: Mapping[str, Any],
        *,
        session_id: str | None = None,
    ) -> tuple[float, ...]: ...
