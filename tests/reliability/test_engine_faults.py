"""Engine faults: a fault-injecting SGLang-protocol server -> the real SGLang client -> the executor
and slime's generate. One fault ends one rollout with the right status and error, keeps the samples
already built (well-formed), never escapes as an exception, and is retried only where that is safe
(nothing reached a server) and boundedly. Counts are what the server saw, per rollout.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from faultkit import (
    ERROR_KINDS,
    ERROR_TEXT,
    KINDS,
    FaultySGLangServerForTests,
    check_rollout,
    check_slime_sample,
    executor_over_http,
    rollout_input,
    scripted_faults,
    slime_standin,
    soak_plan,
)

from graphrl.models.tokenizer import qwen_tokenizer

CLIENT_TIMEOUT_S = 0.5  # the client's per-request timeout in these tests: a "hang" costs this much
STATUS = {**{k: "failed" for k in ERROR_KINDS}, "abort": "aborted", "length": "truncated", None: "completed"}


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return soak_plan(tmp_path_factory.mktemp("faults"))


def run_rollout(plan, tok, faults, *, settle_s: float = 0.0, **engine_kw):
    """One rollout of the soak graph against a fresh fault server; (result, served, aborts)."""
    engine_kw.setdefault("timeout_s", CLIENT_TIMEOUT_S)
    with FaultySGLangServerForTests(tok, faults=faults) as srv:
        ex = executor_over_http(plan, srv.url, tok, **engine_kw)

        async def main():
            try:
                return await ex.run(rollout_input(0))
            finally:
                await asyncio.sleep(settle_s)  # let fire-and-forget /abort_request calls land
                await ex.endpoints.close()

        res = asyncio.run(main())
        return res, srv.seen("r-0"), list(srv.aborts)


# ------------------------------------------------------------------------------ executor


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_on_a_later_call_ends_the_rollout_and_keeps_the_sample_built_so_far(plan, tok, kind):
    res, served, _ = run_rollout(plan, tok, scripted_faults(None, kind), max_retries=5, backoff_s=0.01)
    assert check_rollout(plan, res, served) == kind
    assert res.status == STATUS[kind]
    if kind in ERROR_KINDS:
        assert res.error.startswith("EngineError") and ERROR_TEXT[kind] in res.error
    # the first turn (tool call), the tool's observation and (for abort/length) the partial second
    # turn are kept as one well-formed thread sample
    (s,) = res.samples
    assert s.status == ("truncated" if kind == "length" else STATUS[kind])
    kinds = [(sp.node, sp.kind, sp.mask) for sp in s.spans]
    assert kinds[0] == ("act", "generated", 1)
    assert ("look", "observation", 0) in kinds
    if kind in ("abort", "length"):
        assert kinds[-1] == ("act", "generated", 1)
        assert s.response_ids[s.spans[-1].start :] == served[-1].output_ids  # the partial tokens, verbatim
    else:
        assert kinds[-1][2] == 0  # nothing generated after the fault
    assert [p for p in res.path] == [("act", 1), ("look", 1), ("act", 2)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_fault_on_the_first_call_leaves_no_half_built_sample(plan, tok, kind):
    res, served, _ = run_rollout(plan, tok, scripted_faults(kind))
    assert check_rollout(plan, res, served) == kind
    assert res.status == STATUS[kind]
    if kind in ERROR_KINDS:  # a thread sample with no response is dropped, never emitted malformed
        assert res.samples == () and len(served) == 1
    else:  # the partial reply is the sample's whole response
        (s,) = res.samples
        assert s.response_ids == served[0].output_ids and s.status == STATUS[kind]
    assert res.path == (("act", 1),)  # no tool after a fault


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_a_request_that_reached_the_server_is_never_retried(plan, tok, kind):
    res, served, _ = run_rollout(plan, tok, scripted_faults(kind, kind, kind), max_retries=5, backoff_s=0.01)
    assert [r.kind for r in served] == [kind]  # max_retries=5, yet exactly one request
    assert res.status == "failed"


def test_503_is_retried_only_when_asked_and_at_most_max_retries_times(plan, tok):
    always = scripted_faults(None, *["http503"] * 10)
    res, served, _ = run_rollout(plan, tok, always, retry_on_503=True, max_retries=2, backoff_s=0.01)
    assert [r.kind for r in served] == ["ok", "http503", "http503", "http503"]  # 1 + max_retries
    assert check_rollout(plan, res, served, retries=2) == "http503"

    twice = scripted_faults(None, "http503", "http503")
    res, served, _ = run_rollout(plan, tok, twice, retry_on_503=True, max_retries=2, backoff_s=0.01)
    assert [r.kind for r in served] == ["ok", "http503", "http503", "ok"]
    assert res.status == "completed" and res.reward == 1.0
    assert [c.node for c in res.calls] == ["act", "look", "act"]  # a retried call is recorded once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_retried_with_backoff_and_the_rollout_completes(plan, tok):
    """No server yet: connecting fails before any byte is sent, which is the one safe retry."""
    port = _free_port()
    srv = FaultySGLangServerForTests(tok, port=port)
    ex = executor_over_http(
        plan, f"http://127.0.0.1:{port}", tok, max_retries=8, backoff_s=0.05, max_backoff_s=0.2, timeout_s=5
    )

    async def main():
        task = asyncio.create_task(ex.run(rollout_input(0)))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(srv.__enter__)  # the server comes up while the client backs off
        try:
            return await task
        finally:
            await ex.endpoints.close()

    try:
        res = asyncio.run(main())
        served = srv.seen("r-0")
    finally:
        srv.__exit__(None, None, None)
    assert res.status == "completed", res.error
    assert check_rollout(plan, res, served) == "ok"  # the refused attempts never reached it


def test_a_hung_request_times_out_and_is_aborted_on_the_server(plan, tok):
    t0 = time.monotonic()
    res, served, aborts = run_rollout(plan, tok, scripted_faults("hang"), settle_s=0.2)
    assert time.monotonic() - t0 < CLIENT_TIMEOUT_S + 2
    assert res.status == "failed" and f"timed out after {CLIENT_TIMEOUT_S:g}s" in res.error
    assert served[0].rid in aborts  # best-effort POST /abort_request for the rid


def test_an_engine_abort_starts_no_new_call_and_no_tool(plan, tok):
    res, served, _ = run_rollout(plan, tok, scripted_faults("abort"))
    assert res.status == "aborted" and len(served) == 1
    assert [c.node for c in res.calls] == ["act"]  # no tool call record, no second llm call
    assert res.reward is None


# ------------------------------------------------------------------------------ slime's generate


@pytest.fixture(scope="module")
def compiled(plan, tmp_path_factory):
    from graphrl.compilers.slime.emit import write_slime_target

    out = tmp_path_factory.mktemp("slime_faults")
    write_slime_target(plan, out)
    return out / "plan.json"


def slime_generate(compiled, tok, url, sample, *, timeout_s: float = CLIENT_TIMEOUT_S):
    """slime's call: generate(args, sample, sampling_params), with graphrl's default engine factory."""
    from graphrl.compilers.slime.adapter import SlimeTarget

    sm = slime_standin()
    host, port = url.removeprefix("http://").split(":")
    args = sm.ArgsStandIn(sglang_router_ip=host, sglang_router_port=int(port), graphrl_request_timeout_s=timeout_s)
    target = SlimeTarget(compiled, tokenizer_loader=lambda path: tok)
    params = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": 1024,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }

    async def main():
        try:
            return await target.generate(args, sample, params)
        finally:
            await target.close()

    return asyncio.run(main())


SLIME_STATUS = {**{k: "failed" for k in ERROR_KINDS}, "abort": "aborted", "length": "truncated", "ok": "completed"}


@pytest.mark.parametrize("direct", [False, True], ids=["append_response_tokens", "direct"])
@pytest.mark.parametrize("kind", ("ok",) + KINDS)
def test_slime_generate_turns_each_fault_into_a_well_formed_sample(plan, compiled, tok, kind, direct):
    sm = slime_standin()
    cls = sm.SampleStandInNoAppend if direct else sm.SampleStandIn
    with FaultySGLangServerForTests(tok, faults=scripted_faults(None, None if kind == "ok" else kind)) as srv:
        sample = cls(index=7, group_index=3, prompt="question 7", label="42", session_id="slime-7")
        out = slime_generate(compiled, tok, srv.url, sample)
        served = srv.seen("slime-7")
    assert out is sample  # one sample per rollout, filled in place
    assert sample.status.value == SLIME_STATUS[kind]
    assert sample.rollout_id == 7
    info = sample.metadata["graphrl"]
    assert info["status"] == SLIME_STATUS[kind]
    if kind in ERROR_KINDS:
        assert ERROR_TEXT[kind] in info["error"]
    if kind in ERROR_KINDS or kind == "abort":
        assert sample.remove_sample is True and sample.reward == 0.0  # still counted, zero loss
    else:
        assert sample.remove_sample is False and isinstance(sample.reward, float)
    if kind == "ok":
        assert sample.reward == 1.0
    assert len(served) == 2  # act, then act again after the tool: no retry of the faulted call
    check_slime_sample(plan, sample, served)


@pytest.mark.parametrize("kind", ERROR_KINDS)
def test_slime_generate_with_a_fault_on_the_first_call_gives_a_masked_placeholder(plan, compiled, tok, kind):
    sm = slime_standin()
    with FaultySGLangServerForTests(tok, faults=scripted_faults(kind)) as srv:
        sample = sm.SampleStandIn(index=1, group_index=1, prompt="q", label="42", session_id="slime-1")
        slime_generate(compiled, tok, srv.url, sample)
        served = srv.seen("slime-1")
    assert sample.status.value == "failed" and sample.remove_sample is True and sample.reward == 0.0
    assert sample.metadata["graphrl"].get("placeholder") is True and len(served) == 1
    check_slime_sample(plan, sample, served)
