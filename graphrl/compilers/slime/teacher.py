"""On-policy distillation from a teacher the graph declares (`slime: {teacher: MODEL}`).

Input: a finished rollout (`RolloutResult`), the plan, the teacher's engine (`engines.base.ScoresTokens`,
at the model's endpoint), its concurrency cap, the sampling temperature, the rollout's session id.
Output: per training sample, the list slime reads as `Sample.teacher_log_probs`; or the rollout
marked failed when a teacher call fails.

What slime expects (read from slime's on_policy_distillation.py and its training side): the teacher's
log-prob of every response token given all tokens before it, `len == response_length`, aligned with
the response tokens (observation and template tokens included: they are masked by `loss_mask`, not
left out); slime's own OPD asks SGLang with `logprob_start_len: 0` and keeps the last
`response_length` entries of `input_token_logprobs[1:]`. Here: one `/generate` per sample with the
sample's exact ids (prompt + response, the ledger's), `max_new_tokens: 0`, and the entries for the
response tokens only (`SGLangEngine.token_logprobs`: their ids are checked against the ids sent).

Invariants:
- only samples that train (kept: not `remove`) are scored; the others, and a placeholder, get zeros
  of their response length (slime collects teacher_log_probs for every sample once the first has them);
- a failing teacher call fails the rollout like an engine fault: status failed, its error
  "teacher 'NAME': EngineError: ..." (outcome.settle then zeroes the rewards and removes the samples);
- nothing is scored in evaluation (eval samples do not train).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ...engines.base import EngineError
from ...plan import Plan
from ...runtime.executor import RolloutResult
from ...runtime.outcome import settle
from .config import SlimeConfig, SlimeConfigError

TeacherLogProbs = dict[int, list[float]]  # id(TrainingSample) -> its teacher_log_probs


async def score_rollout(
    plan: Plan,
    res: RolloutResult,
    *,
    teacher: str,
    engine: Any,
    semaphore: asyncio.Semaphore | None,
    temperature: float,
    session_id: str | None,
) -> tuple[RolloutResult, TeacherLogProbs]:
    """Ask the teacher for the log-probs of each kept sample's response tokens (concurrently)."""
    if res.status not in ("completed", "truncated"):
        return res, {}
    score = getattr(engine, "token_logprobs", None)
    if not callable(score):
        raise SlimeConfigError(
            f"the teacher model '{teacher}' has an engine that cannot score tokens ({type(engine).__name__}): "
            "it needs an SGLang endpoint (url: or serve:)"
        )
    kept = [so.sample for so in settle(plan, res).samples if not so.remove]
    params: Mapping[str, Any] = {"temperature": temperature, "skip_special_tokens": False}

    async def one(s: Any) -> tuple[int, list[float]]:
        ids = list(s.prompt_ids) + list(s.response_ids)
        async with semaphore if semaphore is not None else contextlib.nullcontext():
            lps = await score(ids, len(s.prompt_ids), params, session_id=session_id)
        if len(lps) != len(s.response_ids):
            raise EngineError(f"{len(lps)} log-probs for {len(s.response_ids)} response tokens")
        return id(s), list(lps)

    try:
        got = await asyncio.gather(*(one(s) for s in kept))
    except EngineError as exc:
        failed = dataclasses.replace(res, status="failed", error=f"teacher '{teacher}': EngineError: {exc}")
        return failed, {}
    return res, dict(got)


def zeros(n: int) -> list[float]:
    """teacher_log_probs of a sample that does not train: slime needs them on every sample."""
    return [0.0] * n


def check_teacher_vocab(cfg: SlimeConfig, load: Callable[[str], Any]) -> None:
    """The teacher scores the policy's token ids: a teacher that declares its own `tokenizer:` must
    have the policy's vocabulary (a teacher without one shares the policy's, as every frozen model)."""
    teacher = cfg.teacher
    if teacher is None or teacher not in cfg.tokenizers:
        return
    policy_path, teacher_path = cfg.hf_checkpoint, cfg.tokenizers[teacher]
    a, b = _vocab(load(policy_path)), _vocab(load(teacher_path))
    if a != b:
        only = sorted(set(b) - set(a))[:3] or sorted(set(a) - set(b))[:3]
        differ = f"e.g. {only}" if only else "the same tokens map to other ids"
        raise SlimeConfigError(
            f"the teacher model '{teacher}' uses another vocabulary than the policy ({teacher_path}: "
            f"{len(b)} tokens, {policy_path}: {len(a)} tokens; {differ}): on-policy distillation scores the "
            "policy's token ids with the teacher, so both need the same tokenizer"
        )


def _vocab(tok: Any) -> dict[str, int]:
    get = getattr(tok, "get_vocab", None)
    if callable(get):
        return dict(get())
    return {str(i): i for i in range(len(tok))}
