"""Writing graphrl's training samples into slime's `Sample` objects (duck-typed, nothing imported).

Input: the `Sample` slime passed in (or a copy of it), a frozen `TrainingSample` from the ledger.
Output: the same object with slime's fields set: `tokens` (prompt ids then response ids, exactly
the ledger's), `response_length`, `loss_mask`, `rollout_log_probs`, `response`, `status`,
`reward`, `remove_sample`, `rollout_id`, `metadata`.

Two equivalent paths (tests pin that they agree field by field):
- the object has `append_response_tokens` (slime's own way to extend a sample; it keeps top-p
  replay offsets, prefix-cache statistics and weight versions consistent): one call per span —
  trainable spans with the engine's log-probs, masked spans without (slime writes 0.0) — then one
  token-less call per engine call with its finish reason, cache counters, weight version and
  speculative-decoding counters (the /generate meta_info), as slime's own multi-turn generate does;
- otherwise the fields are assigned directly (weight versions appended, spec counters added to
  `spec_info` under --sglang-speculative-algorithm, as slime does).
Invariants: len(loss_mask) == response_length == len(rollout_log_probs) (== len(teacher_log_probs)
when set: on-policy distillation, teacher.py); prompt and response
have >= 1 token each; nothing is decoded and re-encoded (`response` is a decoding for logs only).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...runtime.ledger import CallRecord, TrainingSample

STATUS = {
    "completed": "COMPLETED",
    "truncated": "TRUNCATED",
    "aborted": "ABORTED",
    "failed": "FAILED",
    "pending": "PENDING",
}
_FINISH = ("stop", "length", "abort")


def status_member(sample: Any, name: str) -> Any:
    """slime's `Sample.Status` member for a graphrl status name (a plain string without the enum)."""
    enum = getattr(type(sample), "Status", None)
    return getattr(enum, STATUS[name]) if enum is not None else name


def status_name(sample: Any) -> str:
    status = getattr(sample, "status", None)
    value = getattr(status, "value", status)
    return str(value).lower() if value is not None else "pending"


def _clear_response(sample: Any) -> None:
    sample.response = ""
    sample.response_length = 0
    sample.loss_mask = None
    sample.rollout_log_probs = None
    for name in (
        "rollout_top_p_token_ids",
        "rollout_top_p_token_offsets",
        "rollout_routed_experts",
        "teacher_log_probs",
    ):
        if hasattr(sample, name):
            setattr(sample, name, None)
    if hasattr(sample, "weight_versions"):
        sample.weight_versions = []  # one per engine call of the response, refilled with it


def needs_reset(sample: Any) -> bool:
    """A sample coming back in (slime's --partial-rollout) rather than a fresh PENDING one."""
    return bool(getattr(sample, "response_length", 0)) or status_name(sample) != "pending"


def reset_to_prompt(sample: Any) -> None:
    """Drop a partial response: graphs restart from the prompt (they cannot resume mid-way)."""
    sample.tokens = []
    _clear_response(sample)
    sample.reward = None
    sample.remove_sample = False
    sample.status = status_member(sample, "pending")
    meta = dict(getattr(sample, "metadata", None) or {})
    for key in ("graphrl", "raw_reward", "round_number", "start_rollout_id"):
        meta.pop(key, None)
    sample.metadata = meta


def write_tokens(target: Any, s: TrainingSample, args: Any) -> None:
    """Prompt ids then the response, span by span (see the module docstring for the two paths)."""
    prompt, resp, lps = list(s.prompt_ids), list(s.response_ids), list(s.rollout_log_probs)
    _clear_response(target)
    append = getattr(target, "append_response_tokens", None)
    if append is None:
        target.tokens = prompt + resp
        target.response_length = len(resp)
        target.loss_mask = list(s.loss_mask)
        target.rollout_log_probs = lps
        _call_stats(target, s, args)
        return
    target.tokens = prompt
    for sp in s.spans:
        trainable = sp.mask == 1
        append(
            args,
            tokens=resp[sp.start : sp.end],
            log_probs=lps[sp.start : sp.end] if trainable else None,
            trainable=trainable,
            update_terminal_info=False,
        )
    for c in s.calls:
        if c.finish_reason in _FINISH:
            append(args, tokens=[], meta_info=_meta_info(c))


def _meta_info(c: CallRecord) -> dict[str, Any]:
    """An engine call as the terminal meta_info slime's own generate passes to append_response_tokens:
    finish reason, cache counters, the weight version and speculative-decoding counters it reported."""
    meta: dict[str, Any] = {
        "finish_reason": {"type": c.finish_reason},
        "prompt_tokens": c.prompt_tokens,
        "cached_tokens": c.cached_tokens,
        "completion_tokens": c.completion_tokens,
    }
    if c.weight_version is not None:
        meta["weight_version"] = c.weight_version
    for key in ("spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct"):
        if getattr(c, key) is not None:
            meta[key] = getattr(c, key)
    return meta


def _call_stats(target: Any, s: TrainingSample, args: Any) -> None:
    """The direct path's version of what append_response_tokens does with each call's meta_info:
    weight versions, and spec-decoding counters when slime runs speculative decoding."""
    spec = getattr(target, "spec_info", None) if getattr(args, "sglang_speculative_algorithm", None) else None
    for c in s.calls:
        if c.finish_reason not in _FINISH:
            continue
        meta = _meta_info(c)
        if "weight_version" in meta and isinstance(getattr(target, "weight_versions", None), list):
            target.weight_versions.append(meta["weight_version"])
        if spec is not None and callable(getattr(spec, "add", None)):
            spec.add(meta)


def write_placeholder(target: Any, pad: int) -> None:
    """A one-token prompt and one masked response token: well-formed for slime, trains nothing."""
    _clear_response(target)
    target.tokens = [pad, pad]
    target.response_length = 1
    target.loss_mask = [0]
    target.rollout_log_probs = [0.0]


def finish(
    target: Any,
    *,
    status: str,
    reward: Any,
    remove: bool,
    rollout_id: Any,
    response: str,
    info: dict[str, Any],
    raw_reward: float | None,
    rounds: int,
) -> Any:
    """The non-token fields. `info` goes to metadata["graphrl"]; slime's own keys next to it."""
    target.response = response
    target.status = status_member(target, status)
    target.reward = reward
    target.remove_sample = remove
    target.rollout_id = rollout_id
    meta = dict(getattr(target, "metadata", None) or {})
    meta["graphrl"] = info
    meta["round_number"] = rounds  # slime's multi-turn metric: engine calls in this sample
    if raw_reward is not None:
        # fan-out: what slime logs as raw_reward (the rollout's, not a credit); post_process_rewards
        # rewrites it after slime's sample hooks. One sample per rollout: sample.reward is the rollout's
        # reward, so the key is left out and slime logs sample.reward, whatever a hook made of it.
        meta["raw_reward"] = raw_reward
    else:
        meta.pop("raw_reward", None)
    target.metadata = meta
    return target


def check_filled(samples: Sequence[Any]) -> None:
    """The shape slime asserts later, checked here so a violation names graphrl, not slime."""
    for x in samples:
        n = x.response_length
        mask = x.loss_mask if x.loss_mask is not None else [1] * n
        lps = x.rollout_log_probs
        teacher = getattr(x, "teacher_log_probs", None)
        if (
            n < 1
            or len(x.tokens) - n < 1
            or len(mask) != n
            or lps is None
            or len(lps) != n
            or (teacher is not None and len(teacher) != n)
        ):
            raise AssertionError(
                f"graphrl produced a malformed sample: tokens {len(x.tokens)}, response_length {n}, "
                f"loss_mask {len(mask)}, rollout_log_probs {None if lps is None else len(lps)}, "
                f"teacher_log_probs {None if teacher is None else len(teacher)}"
            )
