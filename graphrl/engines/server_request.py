"""Validation of SGLang `/generate` request bodies: decoded JSON -> `GenerateRequest` or `BadRequest`.

Input: the decoded body, a tokenizer (for `text` prompts; may be None) and the sampling-param
names the engine supports (None: every name below). Output: a frozen `GenerateRequest` whose
`input_ids` is a list of non-negative ints and whose `sampling_params` hold SGLang names only,
with None-valued entries dropped (None means "the default", as in SGLang).

Invariants: exactly one of `input_ids` / `text`; no batches; `stream`, images, top-logprobs and
the like are refused rather than ignored; every sampling param has the type SGLang gives it.
Unknown top-level keys are ignored, as SGLang does. `logprob_start_len` (SGLang's, default -1) must be
smaller than the prompt length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BadRequest", "GenerateRequest", "parse_generate_request", "SAMPLING_PARAMS"]


class BadRequest(ValueError):
    """The request cannot be served as sent (HTTP 400)."""


@dataclass(frozen=True)
class GenerateRequest:
    input_ids: list[int]
    sampling_params: dict[str, Any]
    rid: str | None
    return_logprob: bool
    return_text_in_logprobs: bool
    logprob_start_len: int = -1  # >= 0 with return_logprob: input_token_logprobs from there (SGLang's rule)


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_num(v: Any) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _is_bool(v: Any) -> bool:
    return type(v) is bool


def _is_str(v: Any) -> bool:
    return type(v) is str


def _is_strs(v: Any) -> bool:
    return _is_str(v) or (type(v) is list and all(map(_is_str, v)))


def _is_ints(v: Any) -> bool:
    return type(v) is list and all(map(_is_int, v))


def _is_dict(v: Any) -> bool:
    return type(v) is dict


# SGLang's SamplingParams names -> (check, what the check expects)
SAMPLING_PARAMS: Mapping[str, tuple[Callable[[Any], bool], str]] = {
    "max_new_tokens": (_is_int, "an int"),
    "min_new_tokens": (_is_int, "an int"),
    "temperature": (_is_num, "a finite number"),
    "top_p": (_is_num, "a finite number"),
    "top_k": (_is_int, "an int"),
    "min_p": (_is_num, "a finite number"),
    "frequency_penalty": (_is_num, "a finite number"),
    "presence_penalty": (_is_num, "a finite number"),
    "repetition_penalty": (_is_num, "a finite number"),
    "stop": (_is_strs, "a string or a list of strings"),
    "stop_token_ids": (_is_ints, "a list of ints"),
    "stop_regex": (_is_strs, "a string or a list of strings"),
    "ignore_eos": (_is_bool, "a bool"),
    "skip_special_tokens": (_is_bool, "a bool"),
    "spaces_between_special_tokens": (_is_bool, "a bool"),
    "no_stop_trim": (_is_bool, "a bool"),
    "sampling_seed": (_is_int, "an int"),
    "n": (_is_int, "an int"),
    "regex": (_is_str, "a string"),
    "json_schema": (_is_str, "a string"),
    "ebnf": (_is_str, "a string"),
    "structural_tag": (_is_str, "a string"),
    "logit_bias": (_is_dict, "an object"),
    "custom_params": (_is_dict, "an object"),
    "stream_interval": (_is_int, "an int"),
}
# Accepted and forwarded, but meaningless without server-side plugins: never refused.
_ALWAYS_OK = frozenset(
    ("custom_params", "stream_interval", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")
)
# Top-level keys whose effect this server cannot produce: refused when set (truthy).
_UNSUPPORTED_TOP = (
    "image_data",
    "video_data",
    "audio_data",
    "input_embeds",
    "lora_path",
    "custom_logit_processor",
    "return_hidden_states",
    "return_routed_experts",
    "session_params",
    "token_ids_logprob",
    "top_logprobs_num",
)


def _check_ranges(sp: Mapping[str, Any]) -> None:
    if sp.get("max_new_tokens", 0) < 0 or sp.get("min_new_tokens", 0) < 0:
        raise BadRequest("max_new_tokens and min_new_tokens must be >= 0")
    if sp.get("temperature", 1.0) < 0:
        raise BadRequest("temperature must be >= 0")
    top_p = sp.get("top_p", 1.0)
    if not 0 < top_p <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}")
    top_k = sp.get("top_k", -1)
    if top_k == 0 or top_k < -1:
        raise BadRequest(f"top_k must be -1 (off) or >= 1, got {top_k}")
    if not 0 <= sp.get("min_p", 0.0) <= 1:
        raise BadRequest("min_p must be in [0, 1]")
    if sp.get("n", 1) != 1:
        raise BadRequest("n > 1 is not supported: send one request per sample")
    if any(t < 0 for t in sp.get("stop_token_ids", ())):
        raise BadRequest("stop_token_ids must be >= 0")


def _sampling_params(raw: Any, supported: Collection[str] | None) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadRequest("sampling_params must be a JSON object")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        spec = SAMPLING_PARAMS.get(key)
        if spec is None:
            raise BadRequest(f"unknown sampling param {key!r}; known: {', '.join(sorted(SAMPLING_PARAMS))}")
        if value is None:
            continue
        check, expected = spec
        if not check(value):
            raise BadRequest(f"sampling_params.{key} must be {expected}, got {value!r}")
        if supported is not None and key not in supported and key not in _ALWAYS_OK:
            raise BadRequest(f"sampling param {key!r} is not supported by this engine")
        out[key] = value
    _check_ranges(out)
    return out


def _prompt_ids(body: Mapping[str, Any], tokenizer: Any) -> list[int]:
    ids, text = body.get("input_ids"), body.get("text")
    if ids is not None and text is not None:
        raise BadRequest("send either input_ids or text, not both")
    if ids is None and text is None:
        raise BadRequest("one of input_ids or text is required")
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest("text must be a string (batched requests are not supported)")
        if tokenizer is None:
            raise BadRequest("this server has no tokenizer: send input_ids")
        ids = list(tokenizer.encode(text))
    elif type(ids) is not list or not all(map(_is_int, ids)):
        raise BadRequest("input_ids must be a list of ints (batched requests are not supported)")
    if not ids:
        raise BadRequest("the prompt is empty")
    if min(ids) < 0:
        raise BadRequest("input_ids must be >= 0")
    return ids


def parse_generate_request(
    body: Any, tokenizer: Any = None, supported: Collection[str] | None = None
) -> GenerateRequest:
    """Validate one `/generate` body; raises `BadRequest` with a message a user can act on."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("stream"):
        raise BadRequest("stream=true is not supported by this server; send stream=false")
    for key in _UNSUPPORTED_TOP:
        if body.get(key):
            raise BadRequest(f"{key!r} is not supported by this server")
    flags = {}
    for key in ("return_logprob", "return_text_in_logprobs"):
        value = body.get(key, False)
        if value is None:
            value = False
        if not _is_bool(value):
            raise BadRequest(f"{key} must be a bool")
        flags[key] = value
    rid = body.get("rid")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise BadRequest("rid must be a non-empty string (batched requests are not supported)")
    ids = _prompt_ids(body, tokenizer)
    start = body.get("logprob_start_len")
    start = -1 if start is None else start
    if not _is_int(start) or start < -1:
        raise BadRequest("logprob_start_len must be an int >= -1 (-1: output log-probs only)")
    if start >= len(ids):
        raise BadRequest(f"logprob_start_len ({start}) must be smaller than the prompt length ({len(ids)})")
    return GenerateRequest(
        input_ids=ids,
        sampling_params=_sampling_params(body.get("sampling_params"), supported),
        rid=rid,
        return_logprob=flags["return_logprob"],
        return_text_in_logprobs=flags["return_text_in_logprobs"],
        logprob_start_len=start,
    )
