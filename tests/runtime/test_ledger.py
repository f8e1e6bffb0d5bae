"""The trajectory ledger: property tests of docs/architecture.md invariants 1, 2, 3 and 5."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphrl.runtime.ledger import (
    CallRecord,
    FanoutError,
    LedgerError,
    SampleBuilder,
    Span,
    TrainingSample,
    assign_credit,
    check_fanout,
    status_for_finish,
)

token_ids = st.lists(st.integers(min_value=0, max_value=151_667), min_size=0, max_size=12)
logprob = st.floats(min_value=-50.0, max_value=0.0, allow_nan=False, allow_infinity=False)
nodes = st.sampled_from(["planner", "executor", "verifier", "python", "judge"])


@st.composite
def runs(draw):
    """One legal append: (ids, kwargs)."""
    ids = draw(token_ids)
    kind = draw(st.sampled_from(["generated", "observation", "template", "padding"]))
    node, visit = draw(nodes), draw(st.integers(min_value=0, max_value=5))
    if kind == "generated":
        mask = draw(st.sampled_from([0, 1]))
        lps = draw(st.lists(logprob, min_size=len(ids), max_size=len(ids)))
    else:
        mask = 0
        lps = draw(st.sampled_from([None, [0.0] * len(ids)]))
    return ids, dict(mask=mask, logprobs=lps, node=node, visit=visit, kind=kind)


prompts = st.lists(st.integers(min_value=0, max_value=151_667), min_size=1, max_size=8)


def gen(ids, node="policy", visit=0, mask=1):
    return dict(mask=mask, logprobs=[-0.5] * len(ids), node=node, visit=visit, kind="generated")


@settings(max_examples=300, deadline=None)
@given(prompt=prompts, appends=st.lists(runs(), min_size=0, max_size=10))
def test_random_appends_keep_every_invariant(prompt, appends):
    b = SampleBuilder(prompt, rollout_id=7)
    for ids, kw in appends:
        span = b.append(ids, **kw)
        assert (span is None) == (len(ids) == 0)
    response = [i for ids, _ in appends for i in ids]
    if not response:
        with pytest.raises(LedgerError, match="at least|>= 1"):
            b.freeze()
        return
    s = b.freeze()
    s.check_invariants()
    # tokens are exactly the prompt followed by what was appended, nothing else
    assert list(s.tokens) == prompt + response
    assert list(s.response_ids) == response and list(s.prompt_ids) == prompt
    assert s.response_length == len(response) == len(s.loss_mask) == len(s.rollout_log_probs)
    want_mask, want_lps = [], []
    for ids, kw in appends:
        want_mask += [kw["mask"]] * len(ids)
        want_lps += list(kw["logprobs"]) if kw["mask"] == 1 else [0.0] * len(ids)
    assert list(s.loss_mask) == want_mask and list(s.rollout_log_probs) == want_lps
    # spans: one per non-empty append, contiguous, in order, covering the response
    labelled = [(kw["node"], kw["visit"], kw["mask"], kw["kind"]) for ids, kw in appends if ids]
    assert [(sp.node, sp.visit, sp.mask, sp.kind) for sp in s.spans] == labelled
    assert s.spans[0].start == 0 and s.spans[-1].end == s.response_length
    assert all(a.end == b_.start for a, b_ in zip(s.spans, s.spans[1:]))
    # mask 1 only on generated tokens
    assert all(sp.kind == "generated" for sp in s.spans if sp.mask == 1)
    # JSON round trip, through text, is exact
    again = TrainingSample.from_json(json.loads(json.dumps(s.to_json())))
    assert again == s


@settings(max_examples=100, deadline=None)
@given(
    prompt=prompts,
    ids=st.lists(st.integers(0, 100), min_size=1, max_size=6),
    kind=st.sampled_from(["observation", "template", "padding"]),
)
def test_mask_one_on_non_generated_tokens_is_refused(prompt, ids, kind):
    b = SampleBuilder(prompt)
    with pytest.raises(LedgerError, match="only generated tokens can be trained"):
        b.append(ids, mask=1, logprobs=[0.0] * len(ids), node="tool", visit=0, kind=kind)
    with pytest.raises(LedgerError, match="0.0 expected"):
        b.append(ids, mask=0, logprobs=[-1.0] * len(ids), node="tool", visit=0, kind=kind)
    assert b.response_length == 0  # refused appends leave nothing behind


@settings(max_examples=100, deadline=None)
@given(ids=st.lists(st.integers(0, 100), min_size=1, max_size=6), extra=st.integers(1, 3), drop=st.booleans())
def test_logprob_count_mismatch_is_refused(ids, extra, drop):
    b = SampleBuilder([1])
    n = max(0, len(ids) - extra) if drop else len(ids) + extra
    with pytest.raises(LedgerError, match="log-probs"):
        b.append(ids, mask=1, logprobs=[-0.1] * n, node="policy", visit=0, kind="generated")


def test_illegal_appends_and_prompts():
    with pytest.raises(LedgerError, match="at least one token"):
        SampleBuilder([])
    b = SampleBuilder()
    with pytest.raises(LedgerError, match="set the prompt"):
        b.append([1], **gen([1]))
    with pytest.raises(LedgerError, match="non-negative"):
        b.set_prompt([3, -1])
    b.set_prompt([3])
    with pytest.raises(LedgerError, match="set once"):
        b.set_prompt([4])
    with pytest.raises(LedgerError, match="need the engine's log-probs"):
        b.append([5], mask=1, node="policy", visit=0, kind="generated")
    with pytest.raises(LedgerError, match="non-finite"):
        b.append([5], mask=1, logprobs=[float("nan")], node="policy", visit=0, kind="generated")
    with pytest.raises(LedgerError, match="kind must be"):
        b.append([5], mask=0, node="policy", visit=0, kind="prompt")
    with pytest.raises(LedgerError, match="mask must be"):
        b.append([5], mask=2, logprobs=[0.0], node="policy", visit=0, kind="generated")
    with pytest.raises(LedgerError, match="node"):
        b.append([5], **gen([5], node=""))
    with pytest.raises(LedgerError, match="visit"):
        b.append([5], **gen([5], visit=-1))
    with pytest.raises(LedgerError, match="integer token ids"):
        b.append(["a"], **gen([0]))
    with pytest.raises(LedgerError, match="at least|>= 1"):
        b.freeze()  # empty response: slime needs one token


def test_untrained_generation_keeps_tokens_but_zeroes_logprobs():
    b = SampleBuilder([1, 2])
    b.append([3, 4], mask=0, logprobs=[-0.3, -0.4], node="judge", visit=0, kind="generated")
    b.append([5], mask=1, logprobs=[-0.5], node="policy", visit=1, kind="generated")
    s = b.freeze()
    assert s.loss_mask == (0, 0, 1) and s.rollout_log_probs == (0.0, 0.0, -0.5)


def test_check_invariants_catches_tampering():
    b = SampleBuilder([9])
    b.append([1, 2], **gen([1, 2]))
    b.append([3], mask=0, node="tool", visit=0, kind="observation")
    s = b.freeze()
    broken = [
        dataclasses.replace(s, loss_mask=(1, 1)),
        dataclasses.replace(s, loss_mask=(1, 0, 0)),
        dataclasses.replace(s, rollout_log_probs=(-0.5, -0.5, -1.0)),
        dataclasses.replace(s, spans=s.spans[:1]),
        dataclasses.replace(s, spans=(s.spans[1], s.spans[0])),
        dataclasses.replace(s, spans=(s.spans[0], Span("tool", 0, 2, 3, 1, "observation"))),
        dataclasses.replace(
            s, tokens=(1, 2, 3), response_length=3, loss_mask=(1, 1, 0), rollout_log_probs=(-0.5, -0.5, 0.0)
        ),
        dataclasses.replace(s, status="done"),
    ]
    for sample in broken:
        with pytest.raises(LedgerError):
            sample.check_invariants()
    with pytest.raises(LedgerError):
        TrainingSample.from_json({**s.to_json(), "loss_mask": [1, 1, 1]})


def test_calls_status_and_json():
    b = SampleBuilder([1], rollout_id="r-1", index=2)
    b.append([2], **gen([2]))
    b.record_call(CallRecord("policy", 0, "policy", 1, 1, cached_tokens=0, latency_s=0.25, finish_reason="stop"))
    b.record_call(CallRecord("policy", 1, "policy", 3, 0, finish_reason="length", cost=0.1))
    s = b.freeze(reward={"acc": 1.0}, metadata={"question": "q"})
    assert s.status == "truncated" and s.index == 2 and s.rollout_id == "r-1"
    assert b.freeze(status="failed").status == "failed"
    assert status_for_finish("abort") == "aborted" and status_for_finish("stop") == "completed"
    with pytest.raises(LedgerError):
        b.record_call({"node": "x"})
    line = json.dumps(s.to_json())
    assert TrainingSample.from_json(json.loads(line)) == s


@given(reward=st.floats(-10, 10, allow_nan=False), n=st.integers(1, 17))
def test_even_credit_sums_to_the_rollout_reward(reward, n):
    credits = assign_credit(reward, n, "even")
    assert len(credits) == n and math.isclose(math.fsum(credits), reward, abs_tol=1e-9)
    assert assign_credit(reward, n, "broadcast") == (reward,) * n
    samples = _siblings(credits)
    check_fanout(samples, reward, "even")
    if n > 1 and abs(reward) > 1e-6:
        with pytest.raises(FanoutError, match="multiplied"):
            check_fanout(_siblings(assign_credit(reward, n, "broadcast")), reward, "even")


def test_dict_rewards_and_fanout_failures():
    credits = assign_credit({"acc": 1.0, "len": -0.5}, 4, "even")
    assert credits[0] == {"acc": 0.25, "len": -0.125}
    check_fanout(_siblings(credits), {"acc": 1.0, "len": -0.5}, "even")
    check_fanout(_siblings(assign_credit(2.0, 3, "broadcast")), 2.0, "broadcast")
    with pytest.raises(FanoutError, match="broadcast"):
        check_fanout(_siblings([2.0, 2.0, 1.0]), 2.0, "broadcast")
    mixed = _siblings([0.5, 0.5])
    mixed[1] = dataclasses.replace(mixed[1], rollout_id=8)
    with pytest.raises(FanoutError, match="share one rollout_id"):
        check_fanout(mixed, 1.0, "even")
    with pytest.raises(FanoutError, match="no samples"):
        check_fanout([], 1.0, "even")
    with pytest.raises(FanoutError, match="indices repeat"):
        check_fanout([_siblings([0.5])[0]] * 2, 1.0, "even")
    with pytest.raises(FanoutError, match="does not match"):
        check_fanout(_siblings([None]), 1.0, "even")
    with pytest.raises(ValueError):
        assign_credit(1.0, 0, "even")
    with pytest.raises(ValueError):
        assign_credit(1.0, 2, "split")


def _siblings(rewards):
    out = []
    for i, r in enumerate(rewards):
        b = SampleBuilder([1, 2], rollout_id=7, index=i)
        b.append([3], **gen([3], node="worker", visit=i))
        out.append(b.freeze(reward=r))
    return out


def test_cut_masked_tail_drops_only_masked_untrained_text():
    b = SampleBuilder([1, 2, 3], rollout_id=0)
    b.append([10, 11], mask=1, logprobs=[-0.1, -0.2], node="a", visit=1, kind="generated")
    b.append([20, 21, 22, 23], mask=0, node="t", visit=1, kind="observation")
    b.cut_masked_tail(7)  # 3 prompt + 2 generated + 2 of the observation
    s = b.freeze()
    assert s.tokens == (1, 2, 3, 10, 11, 20, 21) and s.loss_mask == (1, 1, 0, 0)
    assert [(sp.node, sp.start, sp.end) for sp in s.spans] == [("a", 0, 2), ("t", 2, 4)]
    b.cut_masked_tail(100)  # nothing past the bound: unchanged
    assert b.freeze().tokens == s.tokens
    with pytest.raises(LedgerError, match="generated or trained"):
        b.cut_masked_tail(4)  # would cut into the generated span


def test_a_call_record_as_json_has_its_fields_in_order_and_optional_ones_only_when_set():
    plain = CallRecord("policy", 0, "policy", 5, 2, finish_reason="length", cost=0.5)
    names = [f for f in CallRecord.__dataclass_fields__]
    optional = ("weight_version", "spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct")
    assert list(plain.to_json()) == [n for n in names if n not in optional]
    assert plain.to_json()["error"] is None and plain.to_json()["finish_reason"] == "length"
    spec = CallRecord("policy", 1, "policy", 5, 2, weight_version="7", spec_verify_ct=3)
    got = spec.to_json()
    assert list(got) == [n for n in names if n not in ("spec_accept_token_num", "spec_draft_token_num")]
    assert got["weight_version"] == "7" and got["spec_verify_ct"] == 3
    got["node"] = "changed"  # a new dict each time: the record itself is untouched
    assert spec.node == "policy" and CallRecord.from_json(spec.to_json()) == spec
