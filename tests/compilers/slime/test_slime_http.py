"""The compiled generate over real HTTP: `graphrl serve --model tiny` (SGLang's /generate protocol), the
real SGLang client and tokenizer loading from --hf-checkpoint, the stand-in Sample.

Every generated span must be exactly the ids the server returned for a request whose input ids are
exactly the sample's tokens before the span; masks and log-probs aligned; fan-out siblings share the
rollout id; an abort from the server (what slime does when it has enough samples) ends the rollout
at once.
"""

from __future__ import annotations

import asyncio
import math

import aiohttp
import pytest
from slime_standin import ArgsStandIn, SampleStandIn
from slime_testkit import GRAPHS

from graphrl.compilers.slime.adapter import SlimeTarget
from graphrl.engines.sglang import SGLangEngine

pytest.importorskip("torch")
pytest.importorskip("transformers")


class RecordingEngineForTests:
    """Wraps the real SGLang client and records (input ids, output ids, log-probs) per call."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]] = []

    async def generate(self, input_ids, sampling_params, *, session_id=None):
        gen = await self.inner.generate(input_ids, sampling_params, session_id=session_id)
        self.calls.append((tuple(input_ids), tuple(gen.output_ids), tuple(gen.logprobs)))
        return gen

    async def close(self):
        await self.inner.close()


def _target(out, url, recorders):
    def factory(name, _url, cfg):
        rec = recorders.setdefault(name, RecordingEngineForTests(SGLangEngine(url, timeout_s=cfg.timeout_s)))
        return rec

    return SlimeTarget(out / "plan.json", engine_factory=factory)


def _args(url, checkpoint, **kw):
    host, port = url.removeprefix("http://").split(":")
    return ArgsStandIn(sglang_router_ip=host, sglang_router_port=int(port), hf_checkpoint=str(checkpoint), **kw)


def _check_exact(sample, calls):
    """Each generated span == one recorded reply, sent with exactly the tokens before it."""
    n = sample.response_length
    prompt_len = len(sample.tokens) - n
    assert prompt_len >= 1 and n >= 1
    assert len(sample.loss_mask) == n == len(sample.rollout_log_probs)
    replies = {(inp, out): lps for inp, out, lps in calls}
    for sp in sample.metadata["graphrl"]["spans"]:
        lo, hi = prompt_len + sp["start"], prompt_len + sp["end"]
        assert set(sample.loss_mask[sp["start"] : sp["end"]]) == {sp["mask"]}
        if sp["kind"] != "generated":
            assert sp["mask"] == 0 and not any(sample.rollout_log_probs[sp["start"] : sp["end"]])
            continue
        key = (tuple(sample.tokens[:lo]), tuple(sample.tokens[lo:hi]))
        if key not in replies:  # a reply that ended with a stop token the template consumed keeps it
            raise AssertionError(f"span {sp} is not a reply the server sent for exactly its prefix")
        if sp["mask"] == 1:
            assert sample.rollout_log_probs[sp["start"] : sp["end"]] == pytest.approx(list(replies[key]))


def test_multiturn_rollouts_over_http_are_token_exact(slime_kit, tiny_server, tiny_checkpoint):
    import slime_tools

    slime_tools.CALLS.clear()
    out = slime_kit.compile("multiturn")
    recorders = {}
    target = _target(out, tiny_server, recorders)
    args = _args(tiny_server, tiny_checkpoint)
    samples = [
        SampleStandIn(prompt=f"Question {i}?", label="x", index=i, group_index=i // 4, session_id=f"s{i}")
        for i in range(8)
    ]
    sampling = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": 1024,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }

    async def main():
        try:
            return await asyncio.gather(
                *(target.generate(args, s, dict(sampling, sampling_seed=i)) for i, s in enumerate(samples))
            )
        finally:
            await target.close()

    got = asyncio.run(main())
    calls = recorders["policy"].calls
    assert len(calls) == 8 * 3 and len(slime_tools.CALLS) == 8
    for s in got:
        assert s.status.value in ("completed", "truncated") and s.rollout_id == s.index
        _check_exact(s, calls)
        assert [sp["node"] for sp in s.metadata["graphrl"]["spans"] if sp["kind"] == "generated"] == [
            "think",
            "hint",
            "answer",
        ]


def test_fanout_over_http(slime_kit, tiny_server, tiny_checkpoint):
    out = slime_kit.compile("fanout")
    recorders = {}
    target = _target(out, tiny_server, recorders)
    host, port = tiny_server.removeprefix("http://").split(":")
    args = _args(
        tiny_server,
        tiny_checkpoint,
        custom_reward_post_process_path="graphrl_fanout.post_process_rewards",
        sglang_model_routers={"helper": (host, int(port)), "critic": (host, int(port))},
    )
    sample = SampleStandIn(prompt="Name a river.", label="Nile", index=42, group_index=1, session_id="f")

    async def main():
        try:
            return await target.generate(args, sample, {"temperature": 1.0, "top_k": -1, "top_p": 1.0})
        finally:
            await target.close()

    got = asyncio.run(main())
    assert isinstance(got, list) and got[0] is sample and 2 <= len(got) <= 4  # 1..3 drafts + the answer
    assert {s.rollout_id for s in got} == {42}
    assert got[0].metadata["graphrl"]["status"] in ("completed", "truncated"), got[0].metadata["graphrl"]["error"]
    assert math.fsum(s.reward for s in got) == pytest.approx(got[0].metadata["graphrl"]["rollout_reward"])
    for s in got:
        _check_exact(s, recorders["policy"].calls)
    assert len(recorders["critic"].calls) == len(got) - 1 and len(recorders["helper"].calls) == 1


def test_server_abort_ends_the_rollout_at_once(slime_kit, tiny_server, tiny_checkpoint):
    import slime_tools

    slime_tools.CALLS.clear()
    src = slime_kit.tmp / "long.yaml"
    from slime_testkit import GRAPHS

    src.write_text(
        (GRAPHS / "multiturn.yaml")
        .read_text()
        .replace("max_tokens: 12\n    next: look", "max_tokens: 20000\n    next: look")
    )
    out = slime_kit.compile(src, out="long")
    recorders = {}
    target = _target(out, tiny_server, recorders)
    args = _args(tiny_server, tiny_checkpoint)
    sample = SampleStandIn(prompt="Write a lot.", label="x", index=3, group_index=0, session_id="a")

    async def main():
        task = asyncio.create_task(target.generate(args, sample, {"temperature": 1.0, "top_k": -1, "sampling_seed": 1}))
        await asyncio.sleep(1.0)
        async with aiohttp.ClientSession() as http:  # what slime's abort does to every server
            async with http.post(tiny_server + "/abort_request", json={"rid": "", "abort_all": True}) as r:
                assert r.status == 200
        try:
            return await task
        finally:
            await target.close()

    got = asyncio.run(main())
    assert got.status.value == "aborted" and got.remove_sample is True
    assert len(recorders["policy"].calls) == 1 and slime_tools.CALLS == []  # nothing after the abort
    assert 0 < got.response_length < 20000
    _check_exact(got, recorders["policy"].calls)


def test_generate_from_several_event_loops_leaks_no_http_session(slime_kit, tiny_server, tiny_checkpoint, monkeypatch):
    """slime may call the compiled generate from several loops (its rollout loop, fully_async's worker
    thread, asyncio.run per call): one session per loop, each closed when its loop ends."""
    made = []
    real = aiohttp.ClientSession

    def counting(*a, **kw):
        made.append(real(*a, **kw))
        return made[-1]

    monkeypatch.setattr(aiohttp, "ClientSession", counting)
    out = slime_kit.compile("single")
    target = SlimeTarget(out / "plan.json")  # the real SGLang client, as slime runs it
    args = _args(tiny_server, tiny_checkpoint)
    params = {"temperature": 0.0, "top_p": 1.0}

    async def rollouts(first, n):
        return await asyncio.gather(
            *(
                target.generate(args, SampleStandIn(prompt="Say hi.", label="hi", index=first + i), params)
                for i in range(n)
            )
        )

    for k in range(4):
        for s in asyncio.run(rollouts(10 * k, 5)):
            assert s.response_length >= 1
    assert len(made) == 4  # 20 rollouts from 4 loops: one session per loop
    assert all(s.closed for s in made)


def test_teacher_log_probs_over_http_equal_the_servers_own(slime_kit, tiny_server, tiny_checkpoint):
    """On-policy distillation with the teacher at the same server as the policy (teacher == policy
    model): every response token's teacher log-prob equals the log-prob the server reported when it
    sampled that token, and the whole slice equals what slime's own OPD request (logprob_start_len 0,
    input_token_logprobs[1:][-response_length:]) gets for the sample's ids."""
    src = slime_kit.tmp / "distill_http.yaml"
    src.write_text((GRAPHS / "distill.yaml").read_text().replace("http://127.0.0.1:39998", tiny_server))
    out = slime_kit.compile(src, out="distill_http")
    recorders: dict = {}

    def factory(name, url, cfg):
        if name == "teacher":
            return SGLangEngine(url, timeout_s=cfg.timeout_s)  # the graph's url: the same tiny server
        return recorders.setdefault(name, RecordingEngineForTests(SGLangEngine(url, timeout_s=cfg.timeout_s)))

    target = SlimeTarget(out / "plan.json", engine_factory=factory)
    args = _args(tiny_server, tiny_checkpoint, use_opd=True, opd_type="sglang")
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "skip_special_tokens": False, "no_stop_trim": True}

    async def main():
        try:
            got = [
                # the prompts and seeds of the multiturn test above: the same graph, the same rollouts
                await target.generate(
                    args, SampleStandIn(prompt=f"Question {i}?", label="x", index=i), dict(sampling, sampling_seed=i)
                )
                for i in range(2)
            ]
            slimes = []
            async with aiohttp.ClientSession() as http:
                for s in got:  # slime's on_policy_distillation.reward_func payload, sent by hand
                    body = {
                        "input_ids": s.tokens,
                        "sampling_params": {"temperature": 1.0, "max_new_tokens": 0, "skip_special_tokens": False},
                        "return_logprob": True,
                        "logprob_start_len": 0,
                    }
                    async with http.post(tiny_server + "/generate", json=body) as r:
                        entries = (await r.json())["meta_info"]["input_token_logprobs"]
                    slimes.append([e[0] for e in entries[1:]][-s.response_length :])
            return got, slimes
        finally:
            await target.close()

    got, slimes = asyncio.run(main())
    replies = {(inp, out): lps for inp, out, lps in recorders["policy"].calls}
    for s, slime_slice in zip(got, slimes):
        assert s.status.value in ("completed", "truncated") and not s.remove_sample  # trained, so scored
        n = s.response_length
        assert len(s.teacher_log_probs) == n
        assert s.teacher_log_probs == pytest.approx(slime_slice, abs=1e-6)  # slime's own request and slice
        prompt_len = len(s.tokens) - n
        generated = 0
        for sp in s.metadata["graphrl"]["spans"]:
            if sp["kind"] != "generated":
                continue
            lo, hi = prompt_len + sp["start"], prompt_len + sp["end"]
            reply = replies[(tuple(s.tokens[:lo]), tuple(s.tokens[lo:hi]))]
            assert s.teacher_log_probs[sp["start"] : sp["end"]] == pytest.approx(list(reply), abs=1e-4)
            generated += hi - lo
        assert generated >= 3  # three policy turns were compared, trained and untrained
