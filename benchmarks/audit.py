"""The audit: returned training samples vs what the server actually sampled, and request statistics.

Input: the samples a system returned, grouped by session (one rollout each, in order), and the
simulated servers' call logs (`GET /bench/log`: per session, per call [kind, output ids, log-probs,
finish, prompt tokens, cached tokens, prompt digest]).
Output (plain dicts):
  `audit_samples`: re-tokenisation mismatches -- the trained runs of a rollout's samples (maximal
  runs of loss_mask 1, in order) are paired with the policy's sampled outputs in call order;
  `mismatch_tokens` counts trained tokens that are not the sampled ones (len(trained) - tokens
  matched by difflib), `mismatch_turns` the turns where trained != sampled; `logprob_mismatches`
  counts trained tokens (of exact turns) whose log-prob is not the engine's; `malformed` counts
  samples breaking slime's length rules.
  `request_stats`: calls, prompt tokens, cached tokens (hit rates), and digests of the work done
  (per session: kinds and outputs; prompts) to show two systems made the same requests.
"""

from __future__ import annotations

import difflib
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KIND, IDS, LOGPROBS, FINISH, PROMPT, CACHED, DIGEST = range(7)


def trained_runs(sample: Any) -> list[tuple[list[int], list[float]]]:
    n = sample.response_length
    if not n:
        return []
    resp = sample.tokens[-n:]
    mask = sample.loss_mask if sample.loss_mask is not None else [1] * n
    lps = sample.rollout_log_probs or [0.0] * n
    runs, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((list(resp[start:i]), list(lps[start:i])))
            start = None
    return runs


def _malformed(s: Any) -> bool:
    n = s.response_length
    mask_ok = s.loss_mask is None or len(s.loss_mask) == n
    lp_ok = s.rollout_log_probs is None or len(s.rollout_log_probs) == n
    return not (mask_ok and lp_ok and 0 < n < len(s.tokens))


def audit_samples(rollouts: Mapping[str, Sequence[Any]], policy_log: Mapping[str, list]) -> dict[str, int]:
    out = {
        "samples": 0,
        "trained_tokens": 0,
        "mismatch_tokens": 0,
        "mismatch_turns": 0,
        "logprob_mismatches": 0,
        "malformed": 0,
    }
    for session, samples in rollouts.items():
        runs = [r for s in samples for r in trained_runs(s)]
        sampled = [(call[IDS], call[LOGPROBS]) for call in policy_log.get(session, [])]
        out["samples"] += len(samples)
        out["malformed"] += sum(map(_malformed, samples))
        for k in range(max(len(runs), len(sampled))):
            got, lps = runs[k] if k < len(runs) else ([], [])
            want, want_lps = sampled[k] if k < len(sampled) else ([], [])
            out["trained_tokens"] += len(got)
            if got == want:
                out["logprob_mismatches"] += sum(abs(a - b) > 1e-6 for a, b in zip(lps, want_lps))
                continue
            matcher = difflib.SequenceMatcher(None, want, got, autojunk=False)
            matched = sum(b.size for b in matcher.get_matching_blocks())
            out["mismatch_tokens"] += len(got) - matched
            out["mismatch_turns"] += 1
    return out


def _crc(values: Iterable[Any], seed: int = 0) -> int:
    c = seed
    for v in values:
        c = zlib.crc32(repr(v).encode(), c)
    return c


def request_stats(logs: Mapping[str, Mapping[str, list]]) -> dict[str, Any]:
    """`logs`: role ("policy", "expert") -> session -> calls."""
    stats: dict[str, Any] = {}
    work = prompts = 0
    for role in sorted(logs):
        calls = [c for session in sorted(logs[role]) for c in logs[role][session]]
        p, c = sum(x[PROMPT] for x in calls), sum(x[CACHED] for x in calls)
        stats[role] = {"calls": len(calls), "prompt_tokens": p, "cached_tokens": c, "hit_rate": c / p if p else 0.0}
        work = _crc(((s, [(x[KIND], len(x[IDS]), x[FINISH]) for x in logs[role][s]]) for s in sorted(logs[role])), work)
        prompts = _crc(((s, [x[DIGEST] for x in logs[role][s]]) for s in sorted(logs[role])), prompts)
    stats["calls"] = sum(stats[r]["calls"] for r in logs)
    stats["prompt_tokens"] = sum(stats[r]["prompt_tokens"] for r in logs)
    stats["cached_tokens"] = sum(stats[r]["cached_tokens"] for r in logs)
    stats["hit_rate"] = stats["cached_tokens"] / stats["prompt_tokens"] if stats["prompt_tokens"] else 0.0
    stats["work_digest"] = f"{work:08x}"
    stats["prompt_digest"] = f"{prompts:08x}"
    return stats


def context_mismatches(rollouts: Mapping[str, Sequence[Any]], policy_log: Mapping[str, list]) -> dict[str, int]:
    """For one-sample rollouts (a single growing response): policy calls whose prompt ids are not the
    sample's tokens up to that length -- the model was shown other tokens than the ones training
    conditions on (a conversation re-tokenised from text drifts here even when every sampled token
    is trained verbatim)."""
    from .sim.turns import digest

    calls = bad = 0
    for session, samples in rollouts.items():
        if len(samples) != 1:
            continue
        tokens = list(samples[0].tokens)
        for call in policy_log.get(session, []):
            calls += 1
            n = call[PROMPT]
            bad += n > len(tokens) or digest(tokens[:n]) != call[DIGEST]
    return {"context_calls": calls, "context_mismatches": bad}
