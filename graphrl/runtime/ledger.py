"""The trajectory ledger: appended token runs -> frozen training samples (slime's shape).

Input: a sample's prompt ids (set once), then token runs appended in order, each labelled with
the node and visit that produced it, its kind and its loss mask; the LLM calls made for it.
Output: a frozen `TrainingSample` (tokens = prompt ++ response, response_length, loss_mask,
rollout_log_probs, spans, calls) with a JSON form for trajectory files.

Invariants (docs/architecture.md invariants 1, 2, 5; checked on every append, again by `TrainingSample.check_invariants`):
  * tokens are exactly the prompt ids followed by the appended ids, in order (nothing re-tokenised
    or edited here: the ledger only appends);
  * len(loss_mask) == response_length == len(rollout_log_probs); prompt and response >= 1 token
    each (slime takes the response as tokens[-response_length:]);
  * mask 1 only on kind "generated" (engine output of a trained node); "generated" runs carry the
    engine's log-probs, one per token; every masked token has log-prob 0.0;
  * spans (node, visit, start, end, mask, kind) cover the response exactly: contiguous, in order,
    non-empty, one mask per span.
Fan-out (docs/architecture.md invariants 3): `assign_credit` splits or broadcasts one rollout reward over its samples;
`check_fanout` asserts siblings share a rollout_id and the reward is not multiplied.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

KINDS = ("generated", "observation", "template", "padding")
STATUSES = ("completed", "truncated", "aborted", "failed")
_FINISH_TO_STATUS = {"stop": "completed", "length": "truncated", "abort": "aborted"}


class LedgerError(ValueError):
    """An append or a sample that would break the ledger invariants."""


class FanoutError(ValueError):
    """Sibling samples of one rollout that break the fan-out invariant."""


@dataclass(frozen=True)
class Span:
    """response[start:end] came from `node` at its `visit`-th execution; all with loss mask `mask`."""

    node: str
    visit: int
    start: int
    end: int
    mask: int
    kind: str

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "visit": self.visit,
            "start": self.start,
            "end": self.end,
            "mask": self.mask,
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Span:
        return cls(d["node"], d["visit"], d["start"], d["end"], d["mask"], d["kind"])


@dataclass(frozen=True)
class CallRecord:
    """One engine call made while building a sample (accounting and trajectory drawing)."""

    node: str
    visit: int
    endpoint: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = "stop"  # "stop" | "length" | "abort"
    cost: float = 0.0
    error: str | None = None
    start_s: float | None = None  # when the call started, seconds since the rollout started
    weight_version: str | None = None  # the server's weight version (SGLang's meta_info), if it said
    spec_accept_token_num: int | None = None  # speculative decoding counters, if the server ran a draft
    spec_draft_token_num: int | None = None
    spec_verify_ct: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields in order (the instance's own dict: frozen, no slots), optional ones only when set."""
        out = dict(self.__dict__)
        for k in _OPTIONAL:
            if out[k] is None:
                del out[k]
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CallRecord:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


_OPTIONAL = ("weight_version", "spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct")


def status_for_finish(finish_reason: str) -> str:
    """slime's rule: the last engine call decides; length -> truncated, abort -> aborted."""
    return _FINISH_TO_STATUS.get(finish_reason, "failed")


@dataclass(frozen=True)
class TrainingSample:
    """One training sequence, as slime reads it back (plus graphrl's spans and calls)."""

    tokens: tuple[int, ...]
    response_length: int
    loss_mask: tuple[int, ...]
    rollout_log_probs: tuple[float, ...]
    spans: tuple[Span, ...]
    calls: tuple[CallRecord, ...] = ()
    rollout_id: int | str | None = None
    index: int = 0  # position among the rollout's sibling samples
    status: str = "completed"
    reward: float | dict[str, float] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prompt_length(self) -> int:
        return len(self.tokens) - self.response_length

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return self.tokens[: self.prompt_length]

    @property
    def response_ids(self) -> tuple[int, ...]:
        return self.tokens[self.prompt_length :]

    def with_reward(self, reward: float | dict[str, float] | None) -> TrainingSample:
        return replace(self, reward=reward)

    def check_invariants(self) -> None:
        """Raise LedgerError unless docs/architecture.md invariants 1 (shape), 2 and 5 hold."""
        n = self.response_length
        if not (len(self.loss_mask) == n == len(self.rollout_log_probs)):
            raise LedgerError(
                f"len(loss_mask)={len(self.loss_mask)}, response_length={n}, "
                f"len(rollout_log_probs)={len(self.rollout_log_probs)} differ"
            )
        if n < 1 or self.prompt_length < 1:
            raise LedgerError(f"prompt ({self.prompt_length}) and response ({n}) need >= 1 token each")
        if self.status not in STATUSES:
            raise LedgerError(f"unknown status {self.status!r}; expected one of {STATUSES}")
        pos = 0
        for span in self.spans:
            _check_span_label(span.node, span.visit, span.mask, span.kind)
            if span.start != pos or span.end <= span.start:
                raise LedgerError(f"span {span} does not continue the spans at {pos} (or is empty)")
            if span.end > n:
                raise LedgerError(f"span {span} ends past the response ({n} tokens)")
            if self.loss_mask[span.start : span.end].count(span.mask) != span.end - span.start:
                raise LedgerError(f"loss_mask inside span {span} is not all {span.mask}")
            if span.mask == 0 and any(self.rollout_log_probs[span.start : span.end]):
                raise LedgerError(f"masked tokens of span {span} have non-zero log-probs")
            pos = span.end
        if pos != n:
            raise LedgerError(f"spans cover {pos} of {n} response tokens")

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (one trajectory line); `from_json` inverts it exactly."""
        return {
            "rollout_id": self.rollout_id,
            "index": self.index,
            "status": self.status,
            "reward": self.reward,
            "tokens": list(self.tokens),
            "response_length": self.response_length,
            "loss_mask": list(self.loss_mask),
            "rollout_log_probs": list(self.rollout_log_probs),
            "spans": [s.to_json() for s in self.spans],
            "calls": [c.to_json() for c in self.calls],
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TrainingSample:
        sample = cls(
            tokens=tuple(d["tokens"]),
            response_length=d["response_length"],
            loss_mask=tuple(d["loss_mask"]),
            rollout_log_probs=tuple(float(x) for x in d["rollout_log_probs"]),
            spans=tuple(Span.from_json(s) for s in d["spans"]),
            calls=tuple(CallRecord.from_json(c) for c in d.get("calls", ())),
            rollout_id=d.get("rollout_id"),
            index=d.get("index", 0),
            status=d.get("status", "completed"),
            reward=d.get("reward"),
            metadata=dict(d.get("metadata") or {}),
        )
        sample.check_invariants()
        return sample


def _check_span_label(node: Any, visit: Any, mask: Any, kind: Any) -> None:
    if not isinstance(node, str) or not node:
        raise LedgerError(f"node must be a non-empty string, got {node!r}")
    if not isinstance(visit, int) or isinstance(visit, bool) or visit < 0:
        raise LedgerError(f"visit must be an int >= 0, got {visit!r}")
    if mask not in (0, 1) or isinstance(mask, bool):
        raise LedgerError(f"mask must be 0 or 1, got {mask!r}")
    if kind not in KINDS:
        raise LedgerError(f"kind must be one of {KINDS}, got {kind!r}")
    if mask == 1 and kind != "generated":
        raise LedgerError(f"mask 1 on {kind!r} tokens: only generated tokens can be trained")


_PLAIN_INT = {int}


def _token_ids(ids: Sequence[int], what: str) -> list[int]:
    """A new list of non-negative ints (numpy/int-like ids converted; bools refused).

    Prompts run to thousands of ids per call: the common case (plain ints) is checked with C-level
    passes (`set(map(type, ...))`, `min`), the per-element conversion runs only for other types."""
    out = list(ids)
    if not out:
        return out
    types = set(map(type, out))
    if types != _PLAIN_INT:
        if bool in types:
            raise LedgerError(f"{what} must be non-negative integer token ids")
        try:
            out = [operator.index(i) for i in out]
        except TypeError as exc:
            raise LedgerError(f"{what} must be integer token ids: {exc}") from None
    if min(out) < 0:
        raise LedgerError(f"{what} must be non-negative integer token ids")
    return out


class SampleBuilder:
    """A sample under construction: prompt set once, then append-only. `freeze()` -> TrainingSample."""

    def __init__(self, prompt_ids: Sequence[int] | None = None, *, rollout_id: int | str | None = None, index: int = 0):
        self.rollout_id = rollout_id
        self.index = index
        self._prompt: list[int] | None = None
        self._response: list[int] = []
        self._mask: list[int] = []
        self._logprobs: list[float] = []
        self._spans: list[Span] = []
        self._calls: list[CallRecord] = []
        if prompt_ids is not None:
            self.set_prompt(prompt_ids)

    @property
    def prompt_ids(self) -> tuple[int, ...]:
        return tuple(self._prompt or ())

    @property
    def prompt_length(self) -> int:
        """len(prompt_ids) without the copy (a thread's prompt runs to thousands of ids)."""
        return len(self._prompt or ())

    @property
    def response_length(self) -> int:
        return len(self._response)

    @property
    def calls(self) -> tuple[CallRecord, ...]:
        return tuple(self._calls)

    def set_prompt(self, ids: Sequence[int]) -> None:
        if self._prompt is not None:
            raise LedgerError("the prompt of a sample is set once")
        prompt = _token_ids(ids, "prompt ids")
        if not prompt:
            raise LedgerError("the prompt must have at least one token")
        self._prompt = prompt

    def append(
        self,
        ids: Sequence[int],
        *,
        mask: int,
        logprobs: Sequence[float] | None = None,
        node: str,
        visit: int,
        kind: str,
    ) -> Span | None:
        """Append one run of tokens; returns its span (None for an empty run, which adds nothing).

        kind "generated": engine output; `logprobs` required, one per id; stored as given when
        mask is 1, as 0.0 when mask is 0 (an untrained node). Other kinds: mask must be 0 and
        `logprobs`, if given, all 0.0.
        """
        if self._prompt is None:
            raise LedgerError("set the prompt before appending response tokens")
        _check_span_label(node, visit, mask, kind)
        run = _token_ids(ids, f"{kind} ids of {node}#{visit}")
        if logprobs is not None:
            lps = list(map(float, logprobs))
            if len(lps) != len(run):
                raise LedgerError(f"{node}#{visit}: {len(run)} tokens but {len(lps)} log-probs")
            if not all(map(math.isfinite, lps)):
                raise LedgerError(f"{node}#{visit}: non-finite log-prob")
        elif kind == "generated":
            raise LedgerError(f"{node}#{visit}: generated tokens need the engine's log-probs")
        if kind != "generated" and logprobs is not None and any(x != 0.0 for x in lps):
            raise LedgerError(f"{node}#{visit}: {kind} tokens have no log-probs (0.0 expected)")
        if not run:
            return None
        start = len(self._response)
        self._response.extend(run)
        self._mask.extend([mask] * len(run))
        self._logprobs.extend(lps if mask == 1 else [0.0] * len(run))
        span = Span(node, visit, start, start + len(run), mask, kind)
        self._spans.append(span)
        return span

    def cut_masked_tail(self, max_tokens: int) -> None:
        """Drop what lies past `max_tokens` tokens (prompt + response): only masked tokens that were
        not generated (rendered template text, an observation) may go; a LedgerError otherwise."""
        if self._prompt is None:
            return
        keep = max(0, max_tokens - len(self._prompt))
        if keep >= len(self._response):
            return
        spans = []
        for sp in self._spans:
            if sp.end > keep and (sp.kind == "generated" or sp.mask):
                raise LedgerError(f"cannot cut {sp} at {keep}: it holds generated or trained tokens")
            if sp.start < keep:
                spans.append(sp if sp.end <= keep else Span(sp.node, sp.visit, sp.start, keep, sp.mask, sp.kind))
        del self._response[keep:], self._mask[keep:], self._logprobs[keep:]
        self._spans = spans

    def record_call(self, call: CallRecord) -> None:
        if not isinstance(call, CallRecord):
            raise LedgerError(f"expected a CallRecord, got {type(call).__name__}")
        self._calls.append(call)

    def freeze(
        self,
        *,
        status: str | None = None,
        reward: float | dict[str, float] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> TrainingSample:
        """The finished sample. status None: from the last call's finish reason (none: completed)."""
        if self._prompt is None:
            raise LedgerError("a sample needs a prompt")
        if status is None:
            status = status_for_finish(self._calls[-1].finish_reason) if self._calls else "completed"
        sample = TrainingSample(
            tokens=tuple(self._prompt) + tuple(self._response),
            response_length=len(self._response),
            loss_mask=tuple(self._mask),
            rollout_log_probs=tuple(self._logprobs),
            spans=tuple(self._spans),
            calls=tuple(self._calls),
            rollout_id=self.rollout_id,
            index=self.index,
            status=status,
            reward=reward,
            metadata=dict(metadata or {}),
        )
        sample.check_invariants()
        return sample


CREDIT_MODES = ("even", "broadcast", "discounted", "last")


def credit_weights(mode: str, n_samples: int, discount: float = 1.0) -> tuple[float, ...]:
    """The share of a rollout's reward each of its samples (in order) gets: "even" 1/n each (the
    shares sum to 1); "broadcast" 1 each; "discounted" discount ** (samples after it), so the last
    gets 1 and earlier ones less; "last" 1 for the last sample, 0 before it."""
    if not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be an int >= 1, got {n_samples!r}")
    if mode == "even":
        return (1.0 / n_samples,) * n_samples
    if mode == "broadcast":
        return (1.0,) * n_samples
    if mode == "discounted":
        return tuple(float(discount) ** (n_samples - 1 - i) for i in range(n_samples))
    if mode == "last":
        return (0.0,) * (n_samples - 1) + (1.0,)
    raise ValueError(f"credit mode must be one of {', '.join(CREDIT_MODES)}, got {mode!r}")


def assign_credit(
    reward: float | Mapping[str, float], n_samples: int, mode: str, discount: float = 1.0
) -> tuple[float | dict[str, float], ...]:
    """One rollout's reward -> one credit per sample, by `credit_weights`. Dicts per key."""
    weights = credit_weights(mode, n_samples, discount)
    if isinstance(reward, Mapping):
        return tuple({k: float(v) * w for k, v in reward.items()} for w in weights)
    return tuple(float(reward) * w for w in weights)


def check_fanout(
    samples: Sequence[TrainingSample], reward: float | Mapping[str, float], mode: str, discount: float = 1.0
) -> None:
    """Raise FanoutError unless the siblings share a rollout_id and carry `reward` exactly once
    (even: credits sum to it; broadcast: each equals it)."""
    if not samples:
        raise FanoutError("a rollout produced no samples")
    ids = {s.rollout_id for s in samples}
    if len(ids) != 1 or None in ids:
        raise FanoutError(f"sibling samples must share one rollout_id, got {sorted(map(str, ids))}")
    indices = [s.index for s in samples]
    if len(set(indices)) != len(indices):
        raise FanoutError(f"sibling sample indices repeat: {indices}")
    keys = list(reward) if isinstance(reward, Mapping) else [None]
    for key in keys:
        target = float(reward[key] if key is not None else reward)  # type: ignore[index,arg-type]
        got = []
        for s in samples:
            value = s.reward
            if isinstance(value, Mapping) != (key is not None) or value is None:
                raise FanoutError(f"sample {s.index} reward {value!r} does not match {reward!r}")
            got.append(float(value[key] if key is not None else value))  # type: ignore[index,arg-type]
        label = "" if key is None else f"[{key!r}]"
        if mode == "even":
            total = math.fsum(got)
            if not math.isclose(total, target, rel_tol=1e-9, abs_tol=1e-12):
                raise FanoutError(
                    f"even credit: sibling rewards{label} sum to {total}, "
                    f"the rollout reward is {target} (multiplied by fan-out?)"
                )
        elif mode == "broadcast":
            if any(not math.isclose(g, target, rel_tol=1e-12, abs_tol=0.0) for g in got):
                raise FanoutError(f"broadcast credit: sibling rewards{label} {got} != {target}")
        elif mode in CREDIT_MODES:
            want = [target * w for w in credit_weights(mode, len(got), discount)]
            if any(not math.isclose(g, t, rel_tol=1e-9, abs_tol=1e-12) for g, t in zip(got, want)):
                raise FanoutError(f"{mode} credit: sibling rewards{label} {got} != {want}")
        else:
            raise ValueError(f"credit mode must be one of {', '.join(CREDIT_MODES)}, got {mode!r}")
