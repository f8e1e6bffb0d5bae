"""The node-kind handler table and the trained thread (ids and sample grown together)."""

from __future__ import annotations

import pytest

from graphrl.runtime.handlers import HANDLERS
from graphrl.runtime.ledger import CallRecord, LedgerError, SampleBuilder
from graphrl.runtime.trained_thread import TrainedThread
from graphrl.spec.nodes import KINDS, NODE_KINDS, node_kind


def test_every_node_kind_has_a_handler_and_no_handler_lacks_a_kind():
    assert set(HANDLERS) == set(NODE_KINDS)
    assert [k.model_fields["kind"].default for k in KINDS] == list(NODE_KINDS)


def test_kinds_are_selected_by_their_key_and_the_keyless_kind_is_unique():
    assert [k for k in KINDS if k.selector is None] == [NODE_KINDS["update"]]
    for k in KINDS:
        if k.selector:
            assert node_kind({k.selector: "x"}) is k
    assert node_kind({"llm": "policy", "tool": "python"}) is None


def _call(n: int) -> CallRecord:
    return CallRecord(
        node="a", visit=1, endpoint="policy", prompt_tokens=1, completion_tokens=n, latency_s=0.0, finish_reason="stop"
    )


def test_trained_thread_keeps_sample_and_thread_ids_equal(renderer):
    made: list[SampleBuilder] = []
    th = TrainedThread(
        renderer.thread([{"role": "user", "content": "hi"}]), sampled=True, rollout_id=7, on_sample=made.append
    )
    ids = th.prepare("fail", node="a", visit=1)
    out = list(renderer.encode("hello")) + sorted(renderer.stop_token_ids)[:1]
    th.record_output(out, [-0.5] * len(out), None, mask=1, node="a", visit=1, call=_call(len(out)))
    th.add_messages([{"role": "tool", "content": "obs"}], owner=("t", 1))
    th.prepare("fail", node="a", visit=2)
    (sample,) = made
    frozen = sample.freeze()
    assert frozen.tokens == th.ids and frozen.prompt_ids == ids
    owners = {(s.node, s.mask) for s in frozen.spans}
    assert ("a", 1) in owners and ("t", 0) in owners  # the observation belongs to the node that added it


def test_trained_thread_refuses_to_let_sample_and_thread_drift_apart(renderer):
    made: list[SampleBuilder] = []
    th = TrainedThread(
        renderer.thread([{"role": "user", "content": "hi"}]), sampled=True, rollout_id=1, on_sample=made.append
    )
    th.prepare("fail", node="a", visit=1)
    made[0].append([5], mask=0, node="x", visit=1, kind="observation")  # a write behind the thread's back
    with pytest.raises(LedgerError, match="thread has"):
        th.record_output([9, 10], [-1.0, -1.0], None, mask=1, node="a", visit=1, call=_call(2))
