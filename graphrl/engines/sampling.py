"""SGLang sampling parameters, validated, and one sampling step over a logits row.

Input: an SGLang `sampling_params` mapping (max_new_tokens, temperature, top_p, top_k, min_p, stop,
stop_token_ids, ignore_eos, min_new_tokens, skip_special_tokens, no_stop_trim, sampling_seed, regex,
json_schema, ...);
for `sample_next`, one row of next-token logits and a `torch.Generator`.
Output: a frozen `SamplingParams`; `(token_id, logprob)` for one step.

Semantics follow SGLang (python/sglang/srt/sampling/sampling_params.py and layers/sampler.py):
  * temperature < 1e-6 or top_k == 1 is greedy (argmax); top_k -1 means no top-k cut; top_p 1 and
    min_p 0 mean no cut.
  * log-probs ("sampling" mode, SGLang's default): log softmax(logits / temperature) of the chosen
    token, taken *before* top-k / top-p / min-p truncation and renormalisation; greedy steps report
    log softmax(logits) (SGLang runs greedy at temperature 1). "original" mode reports
    log softmax(logits) for every step, like SGLang with SGLANG_RETURN_ORIGINAL_LOGPROB=1.
  * top-p keeps a token while the probability mass strictly before it (in sorted order) is <= top_p.

Invariants: unknown keys and known-but-unsupported features set to a non-default value raise
`ValueError` (never silently ignored); importing this module does not import torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GREEDY_EPS = 1e-6
LOGPROB_MODES = ("sampling", "original")

# Accepted, but only at their neutral value (the local engine does not implement them).
_NEUTRAL: dict[str, Any] = {
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "n": 1,
    "ebnf": None,
    "structural_tag": None,
    "logit_bias": None,
    "custom_params": None,
    "stream_interval": None,
}
# Accepted and ignored: they only shape text rendering details the local engine does not distinguish.
_IGNORED = ("spaces_between_special_tokens",)


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_new_tokens: int = 0
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: int | None = None
    regex: str | None = None  # structured output (engines/grammar.py): the whole output matches
    json_schema: str | None = None  # ... or is JSON valid under this schema (a JSON string)

    def __post_init__(self) -> None:
        if self.regex is not None and self.json_schema is not None:
            raise ValueError("give at most one of regex and json_schema")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS or self.top_k == 1

    @classmethod
    def from_mapping(cls, params: Mapping[str, Any] | None) -> SamplingParams:
        """Validate an SGLang `sampling_params` dict (None or {} gives SGLang's defaults)."""
        values: dict[str, Any] = {}
        for key, value in (params or {}).items():
            if key in _IGNORED:
                continue
            if key in _NEUTRAL:
                if value is not None and value != _NEUTRAL[key]:
                    raise ValueError(f"sampling param {key}={value!r} is not supported by this engine")
                continue
            if key not in _FIELDS:
                raise ValueError(f"unknown sampling param {key!r}")
            if value is None:
                continue  # SGLang treats null as "use the default"
            values[key] = _coerce(key, value)
        return cls(**values)


_FIELDS = {f for f in SamplingParams.__dataclass_fields__}


def _coerce(key: str, value: Any) -> Any:
    if key == "stop":
        items = [value] if isinstance(value, str) else list(value)
        if not all(isinstance(s, str) for s in items):
            raise ValueError("stop must be a string or a list of strings")
        return tuple(items)
    if key == "stop_token_ids":
        items = [value] if isinstance(value, int) else list(value)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            raise ValueError("stop_token_ids must be a list of integers")
        return tuple(items)
    if key == "regex":
        if not isinstance(value, str) or not value:
            raise ValueError("regex must be a non-empty string")
        return value
    if key == "json_schema":
        from .grammar import schema_text

        if not isinstance(value, (str, dict)):
            raise ValueError("json_schema must be a JSON string or an object")
        return schema_text(value)
    if key in ("ignore_eos", "skip_special_tokens", "no_stop_trim"):
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false")
        return value
    if key in ("max_new_tokens", "top_k", "min_new_tokens", "sampling_seed"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{key} must be an integer, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def sample_next(logits: Any, params: SamplingParams, generator: Any, *, logprob_mode: str = "sampling"):
    """One SGLang-style sampling step on a 1-D float logits row -> (token id, log-prob).

    Sampling is by inverse CDF (one uniform draw from `generator`, a cumulative sum, a binary
    search): exact, and an order of magnitude cheaper on CPU than `torch.multinomial` or a full sort
    over a 150k vocabulary. Truncation looks at the top 256 (then 4096) candidates first and sorts
    the whole vocabulary only when top-p needs more than that.
    """
    import torch

    logits = logits.float()
    if params.greedy:
        token = int(torch.argmax(logits))
        return token, float(logits[token] - torch.logsumexp(logits, dim=-1))
    scaled = logits / params.temperature if params.temperature != 1.0 else logits
    probs = torch.softmax(scaled, dim=-1)
    index = None
    if params.top_k != -1 or params.top_p < 1.0:
        weights, index = _candidates(torch, probs, params.top_k, params.top_p)
        if params.top_p < 1.0:
            weights = weights.clone()
            weights[torch.cumsum(weights, dim=-1) - weights > params.top_p] = 0.0
        if params.min_p > 0.0:
            weights = torch.where(weights >= weights[0] * params.min_p, weights, 0.0)
    elif params.min_p > 0.0:
        weights = torch.where(probs >= probs.max() * params.min_p, probs, 0.0)
    else:
        weights = probs
    cdf = torch.cumsum(weights, dim=-1)
    u = torch.rand(1, generator=generator, device=cdf.device, dtype=cdf.dtype) * cdf[-1]
    pick = min(int(torch.searchsorted(cdf, u)), cdf.shape[-1] - 1)
    token = int(index[pick]) if index is not None else pick
    if logprob_mode == "original":
        return token, float(logits[token] - torch.logsumexp(logits, dim=-1))
    return token, float(torch.log(probs[token]))


def _candidates(torch: Any, probs: Any, top_k: int, top_p: float) -> tuple[Any, Any]:
    """The highest-probability tokens, sorted descending: enough to apply top-k and top-p exactly."""
    vocab = probs.shape[-1]
    limit = vocab if top_k == -1 else min(top_k, vocab)
    for size in (256, 4096) if top_p < 1.0 else ():
        if size >= limit:
            break
        weights, index = torch.topk(probs, size)
        # Everything past the candidates is cut once the mass before the last candidate > top_p.
        if float(weights[:-1].sum()) > top_p:
            return weights, index
    if limit < vocab:
        return torch.topk(probs, limit)
    return torch.sort(probs, descending=True)
