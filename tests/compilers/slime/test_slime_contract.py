"""The compiled generate/reward functions against slime's contract, with a stand-in for slime's Sample.

Scripted engines (by model name) make every reply exact; the tokenizer is the real Qwen one. Each test
checks one clause of docs/architecture.md, slime contract §1-§3 on both stand-ins: `SampleStandIn` (slime's
append_response_tokens semantics) and `SampleStandInNoAppend` (the direct path).
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import inspect
import math

import pytest
from slime_standin import ArgsStandIn, SampleStandIn, SampleStandInNoAppend

from graphrl.compilers.slime.config import SlimeConfigError
from graphrl.engines.base import EngineError

BOTH = pytest.mark.parametrize("Sample", [SampleStandIn, SampleStandInNoAppend], ids=["append", "direct"])
ST = SampleStandIn.Status


def _sample(Sample, prompt="What is the capital of France?", label="Paris", index=7, group=3, **kw):
    return Sample(
        prompt=prompt,
        label=label,
        index=index,
        group_index=group,
        session_id="sess-7",
        metadata={"source_name": "unit"},
        **kw,
    )


def _untimed(x):
    """Metadata without wall-clock values (latencies differ between two runs)."""
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if k not in ("latency_s", "start_s")}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def _fields(s):
    return dict(
        tokens=s.tokens,
        response_length=s.response_length,
        loss_mask=s.loss_mask,
        rollout_log_probs=s.rollout_log_probs,
        response=s.response,
        status=s.status.value,
        reward=s.reward,
        remove_sample=s.remove_sample,
        rollout_id=s.rollout_id,
        metadata=_untimed(s.metadata),
    )


# ---------------------------------------------------------------------------------------- signatures
def test_compiled_module_signatures(slime_kit):
    out = slime_kit.compile("fanout")
    spec = importlib.util.spec_from_file_location("compiled_fanout", out / f"{slime_kit.module_name()}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    params = list(inspect.signature(mod.generate).parameters)
    assert params[:3] == ["args", "sample", "sampling_params"]  # slime's plugin contract test
    assert "evaluation" in params  # slime passes evaluation= only to a parameter of that name
    assert inspect.signature(mod.generate).parameters["evaluation"].default is False
    assert inspect.iscoroutinefunction(mod.generate) and inspect.iscoroutinefunction(mod.reward_func)
    assert list(inspect.signature(mod.reward_func).parameters)[:2] == ["args", "sample"]
    assert list(inspect.signature(mod.post_process_rewards).parameters) == ["args", "samples"]
    assert not any(name.startswith("slime") for name in mod.__dict__)  # nothing imports slime


# ---------------------------------------------------------------------------------------- one sample
@BOTH
def test_single_sample_prompt_first_tokens_mask_and_logprobs(slime_kit, Sample):
    slime_kit.compile("single")
    eng = slime_kit.engine(["Paris"])
    sample = _sample(Sample)
    got = slime_kit.run(slime_kit.target({"policy": eng}), sample, ArgsStandIn())
    assert got is sample  # the incoming object, filled
    req = eng.requests[0]
    reply = slime_kit.reply("Paris")
    n = got.response_length
    assert n == len(reply.output_ids)
    assert got.tokens[:-n] == list(req.input_ids)  # prompt ids first: exactly what was sent
    assert got.tokens[-n:] == list(reply.output_ids)  # then exactly what came back
    assert got.loss_mask == [1] * n
    assert got.rollout_log_probs == pytest.approx(list(reply.logprobs))
    assert got.status == ST.COMPLETED and got.reward == 1.0 and got.remove_sample is False
    assert got.rollout_id == 7 and got.group_index == 3
    assert req.session_id == "sess-7"  # slime's session id is the routing key
    assert got.response.startswith("Paris")
    info = got.metadata["graphrl"]
    assert info["spans"] == [{"node": "solve", "visit": 1, "start": 0, "end": n, "mask": 1, "kind": "generated"}]
    assert info["status"] == "completed" and info["rollout_reward"] == 1.0
    assert got.metadata["source_name"] == "unit"
    assert "raw_reward" not in got.metadata  # one sample per rollout: slime logs sample.reward (hooks included)
    assert got.metadata["round_number"] == 1


def test_both_paths_agree_field_by_field(slime_kit):
    slime_kit.compile("multiturn")
    script = ["I will look.", "A hint.", "Paris"]
    eng = slime_kit.engine(script)
    a = slime_kit.run(slime_kit.target({"policy": eng}), _sample(SampleStandIn), ArgsStandIn())
    b = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(script)}), _sample(SampleStandInNoAppend), ArgsStandIn()
    )
    assert _fields(a) == _fields(b)
    # the append path also keeps slime's per-call statistics, as slime's own multi-turn generate does
    assert a.prefix_cache_info.cached_tokens == 3 * 3
    assert a.prefix_cache_info.total_prompt_tokens == sum(len(r.input_ids) for r in eng.requests)


@BOTH
def test_multiturn_masks_align_with_engine_calls(slime_kit, Sample):
    import slime_tools

    slime_tools.CALLS.clear()
    slime_kit.compile("multiturn")
    eng = slime_kit.engine(["I will look.", "A hint.", "Paris"])
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample), ArgsStandIn())
    n = got.response_length
    prompt_len = len(got.tokens) - n
    assert len(got.loss_mask) == n == len(got.rollout_log_probs)
    spans = got.metadata["graphrl"]["spans"]
    kinds = [(s["node"], s["kind"], s["mask"]) for s in spans]
    assert ("think", "generated", 1) in kinds and ("answer", "generated", 1) in kinds
    assert ("hint", "generated", 0) in kinds  # train: false -> masked
    assert any(k == "observation" and m == 0 for _, k, m in kinds)  # the tool result is masked
    calls = iter(eng.requests)
    for sp in spans:
        lo, hi = sp["start"], sp["end"]
        assert set(got.loss_mask[lo:hi]) == {sp["mask"]}
        if sp["mask"] == 0:
            assert set(got.rollout_log_probs[lo:hi]) == {0.0}
        if sp["kind"] == "generated":
            req = next(calls)
            # token-exact: the sample up to this span is exactly the request, the span its reply
            assert list(req.input_ids) == got.tokens[: prompt_len + lo]
            reply = slime_kit.reply(["I will look.", "A hint.", "Paris"][req.call_index])
            assert got.tokens[prompt_len + lo : prompt_len + hi] == list(reply.output_ids)
            if sp["mask"] == 1:
                assert got.rollout_log_probs[lo:hi] == pytest.approx(list(reply.logprobs))
    assert slime_tools.CALLS == ["I will look."]
    assert got.metadata["round_number"] == 3
    info = got.metadata["graphrl"]
    assert [c["node"] for c in info["calls"]] == ["think", "hint", "answer"]
    # each call's record is made once: the sample's calls are the rollout's, not copies
    rollout_calls = {id(c): c["node"] for c in info["rollout_calls"]}  # the tool's call as well
    assert len(rollout_calls) == len(info["rollout_calls"]) == 4
    assert [rollout_calls.get(id(c)) for c in info["calls"]] == ["think", "hint", "answer"]


def _engine_with_meta(slime_kit, replies, metas):
    """Scripted replies whose Generation.meta carries what SGLang's /generate meta_info reported."""
    import dataclasses

    from slime_testkit import LOGPROB

    from graphrl.engines.scripted import ScriptedEngineForTests

    return ScriptedEngineForTests(
        lambda ids, params, i: dataclasses.replace(slime_kit.reply(replies[i]), meta=metas[i]),
        tokenizer=slime_kit.tok,
        default_logprob=LOGPROB,
    )


@BOTH
def test_weight_versions_and_spec_counters_as_slimes_generate_fills_them(slime_kit, Sample):
    slime_kit.compile("multiturn")
    metas = [
        {"weight_version": f"v{i}", "spec_accept_token_num": 2 + i, "spec_draft_token_num": 4, "spec_verify_ct": 1}
        for i in range(3)
    ]
    eng = _engine_with_meta(slime_kit, ["I will look.", "A hint.", "Paris"], metas)
    args = ArgsStandIn(sglang_speculative_algorithm="EAGLE")
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample), args)
    assert got.weight_versions == ["v0", "v1", "v2"]  # one per /generate call, as slime's generate appends
    completion = sum(c["completion_tokens"] for c in got.metadata["graphrl"]["calls"])
    assert (got.spec_info.spec_accept_token_num, got.spec_info.spec_draft_token_num) == (9, 12)
    assert (got.spec_info.spec_verify_ct, got.spec_info.completion_token_num) == (3, completion)
    assert [c["weight_version"] for c in got.metadata["graphrl"]["calls"]] == ["v0", "v1", "v2"]


def test_spec_counters_only_under_speculative_decoding_and_no_weight_version_when_unsaid(slime_kit):
    slime_kit.compile("single")
    eng = _engine_with_meta(slime_kit, ["Paris"], [{"spec_accept_token_num": 3}])
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(SampleStandIn), ArgsStandIn())
    assert got.weight_versions == [] and got.spec_info.spec_accept_token_num == 0
    assert "weight_version" not in got.metadata["graphrl"]["calls"][0]


def test_fanout_siblings_carry_their_own_calls_weight_versions(slime_kit):
    slime_kit.compile("fanout")
    engines = _fanout_engines(slime_kit)
    engines["policy"] = _engine_with_meta(
        slime_kit, ["draft 0", "draft 1", "Paris"], [{"weight_version": f"w{i}"} for i in range(3)]
    )
    out = slime_kit.run(slime_kit.target(engines), _sample(SampleStandIn), _fanout_args())
    assert [o.weight_versions for o in out] == [["w0"], ["w1"], ["w2"]]


# ---------------------------------------------------------------------------------------- statuses
@BOTH
@pytest.mark.parametrize("finish,status", [(None, ST.COMPLETED), ("length", ST.TRUNCATED), ("abort", ST.ABORTED)])
def test_status_follows_the_finish_reason(slime_kit, Sample, finish, status):
    slime_kit.compile("single")
    eng = slime_kit.engine([("Paris", finish) if finish else "Paris"])
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample), ArgsStandIn())
    assert got.status.value == status.value
    assert got.response_length == len(slime_kit.reply(("Paris", finish) if finish else "Paris").output_ids)
    if finish == "abort":
        assert got.remove_sample is True and got.reward == 0.0  # no reward model for ABORTED; trains nothing
    else:
        assert got.remove_sample is False and got.reward == 1.0


@BOTH
@pytest.mark.parametrize("abort_at", [0, 1])
def test_abort_mid_graph_stops_at_once(slime_kit, Sample, abort_at):
    import slime_tools

    slime_tools.CALLS.clear()
    slime_kit.compile("multiturn")
    replies = ["I will look.", "A hint.", "Paris"]
    replies[abort_at] = (replies[abort_at], "abort")
    eng = slime_kit.engine(replies)
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample), ArgsStandIn())
    assert len(eng.requests) == abort_at + 1  # no engine call after the abort
    assert len(slime_tools.CALLS) == (0 if abort_at == 0 else 1)  # and no tool call either
    assert got.status.value == "aborted" and got.remove_sample is True  # slime's abort: ABORTED, resumable
    assert got.reward == 0.0 and got.metadata["graphrl"]["aborted_by"] == "engine"
    last = got.metadata["graphrl"]["spans"][-1]
    partial = slime_kit.reply(replies[abort_at]).output_ids
    assert got.tokens[-len(partial) :] == list(partial)  # the partial tokens are kept, well-formed
    assert len(got.loss_mask) == got.response_length == len(got.rollout_log_probs)
    assert last["node"] == ["think", "hint"][abort_at]


def _abort_during_tool_graph(slime_kit):
    from slime_testkit import GRAPHS

    src = slime_kit.tmp / "abort_in_tool.yaml"
    src.write_text(
        (GRAPHS / "multiturn.yaml")
        .read_text()
        .replace("name: multiturn", "name: abort_in_tool")
        .replace("slime_tools:observe", "slime_tools:observe_then_abort")
    )
    return slime_kit.compile(src, out="abort_in_tool")


@BOTH
def test_slimes_abort_flag_stops_the_rollout_at_the_next_node(slime_kit, Sample, monkeypatch):
    """slime sets GenerateState.aborted while a slow tool runs: no new policy call starts after it."""
    import sys
    import types

    import slime_tools

    class GenerateState:  # stand-in: slime's class, whose SingletonMeta keeps its one instance
        aborted = False

    GenerateState._instances = {GenerateState: GenerateState()}
    fake = types.ModuleType("slime.rollout.sglang_rollout")
    fake.GenerateState = GenerateState
    monkeypatch.setitem(sys.modules, "slime.rollout.sglang_rollout", fake)
    slime_tools.CALLS.clear()
    _abort_during_tool_graph(slime_kit)
    eng = slime_kit.engine(["I will look.", "A hint.", "Paris"])
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample), ArgsStandIn())
    assert len(eng.requests) == 1 and slime_tools.CALLS == ["I will look."]  # the tool ran, nothing after it
    assert got.status.value == "aborted" and got.remove_sample is True and got.reward == 0.0
    info = got.metadata["graphrl"]
    assert info["aborted_by"] == "caller" and [s["node"] for s in info["spans"]] == ["think"]
    assert len(got.loss_mask) == got.response_length == len(got.rollout_log_probs)


def test_without_slime_loaded_the_abort_flag_is_never_set(slime_kit, monkeypatch):
    import sys

    from graphrl.compilers.slime.adapter import SlimeAbortFlag

    monkeypatch.delitem(sys.modules, "slime.rollout.sglang_rollout", raising=False)
    assert SlimeAbortFlag().is_set() is False


def test_graph_routed_abort_gives_a_final_failed_placeholder(slime_kit):
    """A graph that routes to `abort` decided about its row: slime's ABORTED would mean "regenerate"
    (fully_async_rollout requeues it forever), so the sample is FAILED, kept out of the loss."""
    slime_kit.compile("routed_abort")
    eng = slime_kit.engine([])
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(SampleStandIn, prompt=""), ArgsStandIn())
    assert eng.requests == []
    assert got.status == ST.FAILED and got.remove_sample is True and got.reward == 0.0
    info = got.metadata["graphrl"]
    assert info["status"] == "aborted" and info["aborted_by"] == "graph" and "routed to abort" in info["error"]
    assert got.response_length == 1 and len(got.tokens) == 2 and got.loss_mask == [0]
    assert got.rollout_log_probs == [0.0]
    assert got.metadata["graphrl"]["placeholder"] is True


@BOTH
def test_engine_failure_is_a_failed_sample_not_an_exception(slime_kit, Sample):
    slime_kit.compile("single")

    def boom(prompt, i):
        raise EngineError("connection refused")

    got = slime_kit.run(slime_kit.target({"policy": slime_kit.engine(boom)}), _sample(Sample), ArgsStandIn())
    assert got.status.value == "failed" and got.remove_sample is True and got.reward == 0.0
    assert got.response_length == 1 and "connection refused" in got.metadata["graphrl"]["error"]


# ---------------------------------------------------------------------------------------- fan-out
def _fanout_engines(slime_kit, answer="Paris"):
    policy = slime_kit.engine(lambda p, i: answer if p.count("Answer") else f"draft {i}")
    critic = slime_kit.engine(["no", "yes"])
    helper = slime_kit.engine(["think of rivers"])
    return {"policy": policy, "critic": critic, "helper": helper}


def _fanout_args(**kw):
    base = {
        "sglang_model_routers": {"helper": ("10.0.0.9", 31000)},
        "custom_reward_post_process_path": "graphrl_fanout.post_process_rewards",
    }
    return ArgsStandIn(**{**base, **kw})


@BOTH
def test_fanout_siblings_share_rollout_id_and_split_the_reward(slime_kit, Sample):
    slime_kit.compile("fanout")
    engines = _fanout_engines(slime_kit)
    sample = _sample(Sample, index=11, group=5)
    out = slime_kit.run(slime_kit.target(engines), sample, _fanout_args())
    assert isinstance(out, list) and len(out) == 3  # draft, draft, answer
    assert out[0] is sample and all(o is not sample for o in out[1:])
    assert len({id(o) for o in out}) == 3
    assert [o.rollout_id for o in out] == [11, 11, 11]  # rollout_id = the incoming sample.index
    assert [o.index for o in out] == [11, 11, 11] and [o.group_index for o in out] == [5, 5, 5]
    assert [o.metadata["graphrl"]["sample_index"] for o in out] == [0, 1, 2]
    assert math.fsum(o.reward for o in out) == pytest.approx(1.0)  # even credit: not multiplied
    assert all(o.reward == pytest.approx(1 / 3) for o in out)
    assert all(o.metadata["graphrl"]["rollout_reward"] == 1.0 for o in out)
    assert all(o.metadata["raw_reward"] == 1.0 for o in out)
    for o, node in zip(out, ["draft", "draft", "answer"]):
        assert o.loss_mask == [1] * o.response_length
        assert [s["node"] for s in o.metadata["graphrl"]["spans"]] == [node]
    assert len(engines["critic"].requests) == 2 and len(engines["helper"].requests) == 1
    assert out[0].metadata["graphrl"]["path"][0] == ["hint", 1]
    assert "path" not in out[1].metadata["graphrl"]


def _group_of_two(slime_kit, target_answers=("Paris", "Lyon"), credit="even"):
    """Two fan-out rollouts of one prompt group, as generate returns them (3 samples each)."""
    from slime_testkit import GRAPHS

    src = slime_kit.tmp / f"fanout_{credit}.yaml"
    src.write_text((GRAPHS / "fanout.yaml").read_text().replace("credit: even", f"credit: {credit}"))
    slime_kit.compile(src, out=credit)
    flat = []
    for k, answer in enumerate(target_answers):
        target = slime_kit.target(_fanout_engines(slime_kit, answer=answer))
        flat += slime_kit.run(target, _sample(SampleStandIn, index=k, group=0), _fanout_args())
    return target, flat


@pytest.mark.parametrize("credit", ["even", "broadcast"])
def test_post_process_follows_a_hook_that_changed_the_rewards(slime_kit, credit):
    """slime runs sample hooks (and a group RM) after generate, before the post-process: a changed
    sample.reward is read back into the rollout's reward, and raw_reward follows it."""
    target, flat = _group_of_two(slime_kit, credit=credit)
    for s in flat[:3]:
        s.reward *= 2  # a hook doubles rollout 0's rewards
    raw, norm = target.post_process_rewards(_fanout_args(), flat)
    assert raw == pytest.approx([2.0] * 3 + [0.0] * 3)
    assert [s.metadata["raw_reward"] for s in flat] == pytest.approx(raw)  # what slime logs
    share = 1 / 3 if credit == "even" else 1.0
    assert norm == pytest.approx([0.7071 * share] * 3 + [-0.7071 * share] * 3, abs=1e-3)


def test_post_process_keeps_the_stored_reward_when_nothing_changed_it(slime_kit):
    target, flat = _group_of_two(slime_kit)
    raw, _ = target.post_process_rewards(_fanout_args(), flat)
    assert raw == [1.0] * 3 + [0.0] * 3 and [s.metadata["raw_reward"] for s in flat] == raw


def test_fanout_broadcast_credit(slime_kit):
    from slime_testkit import GRAPHS

    src = slime_kit.tmp / "broadcast.yaml"
    src.write_text((GRAPHS / "fanout.yaml").read_text().replace("credit: even", "credit: broadcast"))
    slime_kit.compile(src, out="b")
    out = slime_kit.run(slime_kit.target(_fanout_engines(slime_kit)), _sample(SampleStandIn), _fanout_args())
    assert [o.reward for o in out] == [1.0, 1.0, 1.0]


def test_fanout_wrong_answer_and_reward_func(slime_kit):
    slime_kit.compile("fanout")
    target = slime_kit.target(_fanout_engines(slime_kit, answer="Lyon"))
    out = slime_kit.run(target, _sample(SampleStandIn), _fanout_args())
    assert [o.reward for o in out] == [0.0, 0.0, 0.0]
    args = _fanout_args()
    assert asyncio.run(target.reward_func(args, out)) == [0.0, 0.0, 0.0]  # a list in, a list out
    assert asyncio.run(target.reward_func(args, out[0])) == 0.0
    stray = SampleStandIn(prompt="x")
    with pytest.raises(ValueError, match="not produced by a graphrl generate"):
        asyncio.run(target.reward_func(args, stray))


def test_endpoints_from_routers_and_graph_urls(slime_kit):
    slime_kit.compile("fanout")
    seen = {}
    engines = _fanout_engines(slime_kit)

    from graphrl.compilers.slime.adapter import SlimeTarget

    target = SlimeTarget(
        slime_kit.out / "plan.json",
        tokenizer_loader=lambda p: slime_kit.tok,
        engine_factory=lambda name, url, cfg: seen.setdefault(name, url) and engines[name],
    )
    slime_kit.run(target, _sample(SampleStandIn), _fanout_args(sglang_router_ip="10.0.0.1", sglang_router_port=30000))
    assert seen == {
        "policy": "http://10.0.0.1:30000",
        "helper": "http://10.0.0.9:31000",
        "critic": "http://127.0.0.1:39999",
    }


def test_unknown_model_is_an_error_not_a_fallback(slime_kit):
    slime_kit.compile("fanout")
    target = slime_kit.target(_fanout_engines(slime_kit))
    args = _fanout_args(sglang_model_routers={"other": ("10.0.0.2", 1)})
    with pytest.raises(SlimeConfigError, match=r"helper.*no endpoint.*it serves: other"):
        slime_kit.run(target, _sample(SampleStandIn), args)


# ---------------------------------------------------------------------------------------- eval
def test_eval_mode_own_session_and_shared_sampling_untouched(slime_kit):
    slime_kit.compile("single")
    eng = slime_kit.engine(["Paris", "Paris"])
    target = slime_kit.target({"policy": eng})
    shared = {
        "temperature": 0.3,
        "top_p": 1.0,
        "top_k": 1,
        "max_new_tokens": 64,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }
    before = copy.deepcopy(shared)
    a = _sample(SampleStandIn, index=0)
    a.session_id = None  # slime's eval path does not set one
    b = _sample(SampleStandIn, index=1)
    b.session_id = None
    args = ArgsStandIn()

    async def both():
        await asyncio.gather(
            target.generate(args, a, shared, evaluation=True), target.generate(args, b, shared, evaluation=True)
        )

    asyncio.run(both())
    assert shared == before  # one dict for all eval samples: only read
    sessions = [r.session_id for r in eng.requests]
    assert all(s and s.startswith("graphrl-eval-") for s in sessions) and len(set(sessions)) == 2
    assert all(r.sampling_params["temperature"] == 0.3 and r.sampling_params["top_k"] == 1 for r in eng.requests)
    assert a.reward == 1.0 and a.status == ST.COMPLETED


def test_eval_dataset_with_its_own_reward_model_is_left_to_slime(slime_kit):
    slime_kit.compile("single")
    sample = _sample(SampleStandIn)
    sample.custom_rm_path = "evalpkg.rm"  # slime copies an eval dataset's custom_rm_path onto its samples
    got = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(["Paris"])}), sample, ArgsStandIn(), evaluation=True
    )
    assert got.reward is None and got.metadata["graphrl"]["rollout_reward"] == 1.0  # slime's async_rm scores it


def test_eval_fanout_gives_one_sample_with_the_whole_reward(slime_kit):
    slime_kit.compile("fanout")
    out = slime_kit.run(
        slime_kit.target(_fanout_engines(slime_kit)), _sample(SampleStandIn), _fanout_args(), evaluation=True
    )
    assert not isinstance(out, list)
    assert out.reward == 1.0 and out.metadata["graphrl"]["num_samples"] == 3
    assert [s["node"] for s in out.metadata["graphrl"]["spans"]] == ["answer"]


def test_eval_fanout_scored_by_this_modules_reward_func_gets_the_whole_reward(slime_kit):
    """slime copies --custom-rm-path (this module's reward_func) onto every eval sample: that is the
    graph's own reward, so generate fills the rollout's whole reward, not a training credit."""
    slime_kit.compile("fanout")
    target = slime_kit.target(_fanout_engines(slime_kit))
    sample = _sample(SampleStandIn)
    sample.custom_rm_path = "graphrl_fanout.reward_func"
    out = slime_kit.run(target, sample, _fanout_args(), evaluation=True)
    assert out.reward == 1.0 and out.metadata["graphrl"]["num_samples"] == 3
    assert "eval_scorer" not in out.metadata["graphrl"]
    out.reward = None  # and if slime asked reward_func anyway: still the whole reward, not 1/3
    assert asyncio.run(target.reward_func(_fanout_args(), out)) == 1.0


def test_eval_dataset_rm_type_is_scored_by_slimes_rule_reward(slime_kit, monkeypatch):
    """An eval dataset's rm_type (slime puts it in the sample's metadata) is slime's rule-based
    reward for that dataset: generate leaves the reward to slime, and reward_func (slime's
    custom_rm_path for the sample) hands it to slime's rm_hub with no custom path."""
    import sys
    import types

    seen = []

    async def async_rm(args, sample, **kw):  # stand-in for slime.rollout.rm_hub.async_rm
        seen.append((args.custom_rm_path, sample.custom_rm_path, sample.metadata["rm_type"], sample.response))
        return 0.5

    monkeypatch.setitem(sys.modules, "slime.rollout.rm_hub", types.SimpleNamespace(async_rm=async_rm))
    slime_kit.compile("fanout")
    target = slime_kit.target(_fanout_engines(slime_kit))
    sample = _sample(SampleStandIn)
    sample.custom_rm_path = "graphrl_fanout.reward_func"
    sample.metadata["rm_type"] = "math"
    args = _fanout_args(custom_rm_path="graphrl_fanout.reward_func")
    out = slime_kit.run(target, sample, args, evaluation=True)
    assert out.reward is None and out.metadata["graphrl"]["eval_scorer"] == "rm_type:math"
    assert out.metadata["graphrl"]["rollout_reward"] == 1.0  # the graph's reward is still recorded
    assert asyncio.run(target.reward_func(args, out)) == 0.5
    assert seen == [(None, None, "math", out.response)]
    assert out.custom_rm_path == "graphrl_fanout.reward_func" and args.custom_rm_path  # not changed in place


def test_eval_rm_type_without_slime_is_a_clear_error(slime_kit, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "slime.rollout.rm_hub", None)  # makes the import fail
    slime_kit.compile("single")
    target = slime_kit.target({"policy": slime_kit.engine(["Paris"])})
    sample = _sample(SampleStandIn)
    sample.metadata["rm_type"] = "math"
    out = slime_kit.run(target, sample, ArgsStandIn(), evaluation=True)
    with pytest.raises(SlimeConfigError, match="rm_type 'math'"):
        asyncio.run(target.reward_func(ArgsStandIn(), out))


def test_training_ignores_a_rows_rm_type(slime_kit):
    slime_kit.compile("single")
    sample = _sample(SampleStandIn)
    sample.metadata["rm_type"] = "math"
    got = slime_kit.run(slime_kit.target({"policy": slime_kit.engine(["Paris"])}), sample, ArgsStandIn())
    assert got.reward == 1.0  # training: the graph's reward decides


# ---------------------------------------------------------------------------------------- partial rollout
@BOTH
def test_partial_rollout_sample_restarts_from_the_prompt(slime_kit, Sample):
    slime_kit.compile("single")
    fresh = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(["Paris"])}), _sample(Sample), ArgsStandIn(partial_rollout=True)
    )
    back = _sample(
        Sample,
        tokens=[1, 2, 3, 4],
        response="Par",
        response_length=2,
        loss_mask=[0, 0],
        rollout_log_probs=[-1.0, -1.0],
        status=Sample.Status.ABORTED,
        reward=None,
    )
    back.metadata["start_rollout_id"] = 4
    got = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(["Paris"])}), back, ArgsStandIn(partial_rollout=True)
    )
    assert _fields(got) == _fields(fresh)


@BOTH
def test_a_request_aborted_while_queued_is_a_clean_aborted_sample(slime_kit, Sample):
    """SGLang answers a request aborted in its queue with finish reason abort and no token: the sample
    is ABORTED with a readable reason (it used to be a LedgerError about a 0-token response), and
    comes back under --partial-rollout to restart from its prompt."""
    slime_kit.compile("single")
    args = ArgsStandIn(partial_rollout=True)
    got = slime_kit.run(slime_kit.target({"policy": slime_kit.engine([("", "abort")])}), _sample(Sample), args)
    info = got.metadata["graphrl"]
    assert got.status.value == "aborted" and got.remove_sample is True and got.reward == 0.0
    assert info["error"] == "engine aborted the call of 'solve' before it generated a token"
    assert info["placeholder"] is True and info["aborted_by"] == "engine" and "LedgerError" not in info["error"]
    assert got.response_length == 1 and got.loss_mask == [0] and len(got.tokens) == 2
    fresh = slime_kit.run(slime_kit.target({"policy": slime_kit.engine(["Paris"])}), _sample(Sample), args)
    again = slime_kit.run(slime_kit.target({"policy": slime_kit.engine(["Paris"])}), got, args)
    assert _fields(again) == _fields(fresh)  # back from slime's buffer: from the prompt, placeholder gone


def test_partial_rollout_keeps_the_row_and_session_and_drops_the_response(slime_kit):
    slime_kit.compile("single")
    args = ArgsStandIn(partial_rollout=True)
    back = _sample(
        SampleStandIn,
        tokens=[1, 2, 3, 4],
        response="Par",
        response_length=2,
        loss_mask=[0, 0],
        rollout_log_probs=[-1.0, -1.0],
        status=ST.ABORTED,
        weight_versions=["old"],
    )
    back.metadata.update(start_rollout_id=4, raw_reward=0.0, round_number=1, graphrl={"status": "aborted"})
    eng = slime_kit.engine(["Paris"])
    got = slime_kit.run(slime_kit.target({"policy": eng}), back, args)
    assert got.metadata["source_name"] == "unit" and got.session_id == "sess-7" and got.index == 7
    assert eng.requests[0].session_id == "sess-7"  # the same session: same worker, its prefix cache
    assert "start_rollout_id" not in got.metadata and got.weight_versions == []
    assert got.tokens[: len(eng.requests[0].input_ids)] == list(eng.requests[0].input_ids)


def test_partial_rollout_is_refused_for_fanout(slime_kit):
    slime_kit.compile("fanout")
    with pytest.raises(SlimeConfigError, match="--partial-rollout"):
        slime_kit.run(
            slime_kit.target(_fanout_engines(slime_kit)), _sample(SampleStandIn), _fanout_args(partial_rollout=True)
        )


# ---------------------------------------------------------------------------------------- context bound
def test_max_context_len_clamps_a_call_to_the_room_left(slime_kit):
    slime_kit.compile("single")
    free = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(["Paris"])}), _sample(SampleStandIn), ArgsStandIn()
    )
    prompt = len(free.tokens) - free.response_length
    eng = slime_kit.engine(["Paris is the capital"])
    got = slime_kit.run(
        slime_kit.target({"policy": eng}), _sample(SampleStandIn), ArgsStandIn(rollout_max_context_len=prompt + 2)
    )
    assert eng.requests[0].sampling_params["max_new_tokens"] == 2  # not the node's 16
    assert len(got.tokens) == prompt + 2 and got.status == ST.TRUNCATED


@BOTH
def test_a_rollout_whose_context_reaches_max_context_len_ends_truncated(slime_kit, Sample):
    import slime_tools
    from slime_testkit import GRAPHS

    src = slime_kit.tmp / "think_reward.yaml"  # a reward the truncated rollout can compute
    src.write_text((GRAPHS / "multiturn.yaml").read_text().replace("{{ answer.text }}", "{{ think.text }}"))
    slime_kit.compile(src)
    replies = ["I will look.", "A hint.", "Paris"]
    free = slime_kit.run(slime_kit.target({"policy": slime_kit.engine(replies)}), _sample(Sample), ArgsStandIn())
    prompt = len(free.tokens) - free.response_length
    think = free.metadata["graphrl"]["spans"][0]["end"]
    bound = prompt + think + 2  # think fits; the tool's observation rendered after it does not
    slime_tools.CALLS.clear()
    eng = slime_kit.engine(replies)
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample), ArgsStandIn(rollout_max_context_len=bound))
    assert len(eng.requests) == 1 and slime_tools.CALLS == ["I will look."]  # no call past the bound
    assert got.status.value == "truncated" and got.remove_sample is False
    assert len(got.tokens) == bound  # the observation cut at the bound, nothing over it
    spans = got.metadata["graphrl"]["spans"]
    assert (spans[0]["node"], spans[0]["mask"]) == ("think", 1)
    assert {sp["mask"] for sp in spans[1:]} == {0} and spans[-1]["end"] == think + 2  # masked text, cut
    assert len(got.loss_mask) == got.response_length == len(got.rollout_log_probs)
    assert "--rollout-max-context-len" in got.metadata["graphrl"]["error"]
    assert got.reward == 0.0 and got.metadata["graphrl"]["rollout_reward"] == 0.0  # computed, as for a length cut


def test_a_reward_that_needs_the_unreached_node_fails_and_says_why(slime_kit):
    slime_kit.compile("multiturn")
    got = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(["I will look.", "A hint.", "Paris"])}),
        _sample(SampleStandIn),
        ArgsStandIn(rollout_max_context_len=40),
    )
    error = got.metadata["graphrl"]["error"]
    assert got.status == ST.FAILED and got.remove_sample is True
    assert error.startswith("reward: RenderError") and "ended truncated" in error and "context bound" in error


def test_eval_uses_eval_max_context_len(slime_kit):
    slime_kit.compile("single")
    eng = slime_kit.engine(["Paris", "Paris"])
    target = slime_kit.target({"policy": eng})
    args = ArgsStandIn(rollout_max_context_len=10_000, eval_max_context_len=None)
    free = slime_kit.run(target, _sample(SampleStandIn), args, evaluation=True)
    prompt = len(free.tokens) - free.response_length
    args = ArgsStandIn(rollout_max_context_len=10_000, eval_max_context_len=prompt + 1)
    slime_kit.run(target, _sample(SampleStandIn), args, evaluation=True)
    assert [r.sampling_params["max_new_tokens"] for r in eng.requests] == [16, 1]


def test_multimodal_inputs_are_refused_not_dropped(slime_kit):
    slime_kit.compile("single")
    target = slime_kit.target({"policy": slime_kit.engine(["Paris", "Paris"])})
    sample = _sample(SampleStandIn)
    sample.multimodal_inputs = {"images": ["<an image>"], "videos": None}
    with pytest.raises(SlimeConfigError, match=r"sample 7 carries multimodal inputs \(images\)"):
        slime_kit.run(target, sample, ArgsStandIn())
    sample.multimodal_inputs = {"images": None}  # slime's own test for "has multimodal inputs"
    assert slime_kit.run(target, sample, ArgsStandIn()).reward == 1.0
    with pytest.raises(SlimeConfigError, match="--multimodal-keys"):
        slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(multimodal_keys={"image": "img"}))


# ---------------------------------------------------------------------------------------- flags
def test_every_incompatible_flag_is_named_at_once(slime_kit):
    slime_kit.compile("fanout")
    args = _fanout_args(
        group_rm=True,
        dynamic_sampling_filter_path="x.f",
        log_passrate=True,
        custom_reward_post_process_path=None,
        use_dynamic_batch_size=False,
        apply_chat_template=True,
        rollout_top_p=0.9,
        use_rollout_routing_replay=True,
    )
    with pytest.raises(SlimeConfigError) as e:
        slime_kit.run(slime_kit.target(_fanout_engines(slime_kit)), _sample(SampleStandIn), args)
    msg = str(e.value)
    for flag in (
        "--group-rm",
        "--dynamic-sampling-filter-path",
        "--log-passrate",
        "--custom-reward-post-process-path graphrl_fanout.post_process_rewards",
        "--use-dynamic-batch-size",
        "--apply-chat-template",
        "--rollout-top-p",
        "--use-rollout-routing-replay",
    ):
        assert flag in msg, flag


def test_opd_with_a_teacher_server_is_refused_for_a_graph_with_a_reward(slime_kit):
    slime_kit.compile("single")
    target = slime_kit.target({"policy": slime_kit.engine(["Paris"])})
    with pytest.raises(SlimeConfigError, match=r"--use-opd --opd-type sglang.*own reward.*--opd-type megatron"):
        slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(use_opd=True, opd_type="sglang"))
    got = slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(use_opd=True, opd_type="megatron"))
    assert got.reward == 1.0  # the teacher in training (megatron) leaves the graph's reward alone


def test_opd_with_a_teacher_server_and_no_graph_reward(slime_kit):
    from slime_testkit import GRAPHS

    src = slime_kit.tmp / "noreward.yaml"
    text = (GRAPHS / "single.yaml").read_text()
    src.write_text(text[: text.index("reward:")])
    slime_kit.compile(src, out="noreward")
    target = slime_kit.target({"policy": slime_kit.engine(["Paris"])})
    got = slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(use_opd=True, opd_type="sglang"))
    assert got.reward is None  # slime's OPD reward function asks the teacher


@pytest.mark.parametrize(
    "path",
    [
        "slime.rollout.fully_async_rollout.generate_rollout_fully_async",
        "fully_async_rollout.generate_rollout_fully_async",
    ],
)
def test_fanout_under_fully_async_rollout_is_refused(slime_kit, path):
    slime_kit.compile("fanout")
    with pytest.raises(SlimeConfigError, match=r"fully_async_rollout .* int\(sample.index\)"):
        slime_kit.run(
            slime_kit.target(_fanout_engines(slime_kit)),
            _sample(SampleStandIn),
            _fanout_args(rollout_function_path=path),
        )


def test_one_sample_graphs_run_under_fully_async_rollout(slime_kit):
    slime_kit.compile("single")
    args = ArgsStandIn(rollout_function_path="slime.rollout.fully_async_rollout.generate_rollout_fully_async")
    got = slime_kit.run(slime_kit.target({"policy": slime_kit.engine(["Paris"])}), _sample(SampleStandIn), args)
    assert got.reward == 1.0


def test_reward_key_wraps_the_credit(slime_kit):
    slime_kit.compile("single")
    got = slime_kit.run(
        slime_kit.target({"policy": slime_kit.engine(["Paris"])}),
        _sample(SampleStandIn),
        ArgsStandIn(reward_key="score"),
    )
    assert got.reward == {"score": 1.0}


def test_eval_reward_key_wraps_eval_rewards_only(slime_kit):
    """slime's eval reads sample.reward[--eval-reward-key or --reward-key]: a float there is a TypeError."""
    slime_kit.compile("single")
    target = slime_kit.target({"policy": slime_kit.engine(["Paris", "Paris"])})
    args = ArgsStandIn(eval_reward_key="acc")
    got = slime_kit.run(target, _sample(SampleStandIn), args, evaluation=True)
    assert got.reward == {"acc": 1.0}
    got.reward = None
    assert asyncio.run(target.reward_func(args, got)) == {"acc": 1.0}
    assert slime_kit.run(target, _sample(SampleStandIn), args).reward == 1.0  # training: --reward-key only


def test_config_is_converted_once(slime_kit, monkeypatch):
    from graphrl.compilers.slime import adapter

    slime_kit.compile("single")
    target = slime_kit.target({"policy": slime_kit.engine(["Paris", "Paris", "Paris"])})
    args = ArgsStandIn()
    built = []
    real = adapter._Wired.__init__
    monkeypatch.setattr(adapter._Wired, "__init__", lambda self, *a: (built.append(1), real(self, *a))[1])
    for i in range(3):
        slime_kit.run(target, _sample(SampleStandIn, index=i), args)
    assert built == [1]


@BOTH
def test_a_builtin_dict_reward_without_a_key_trains_on_its_score(slime_kit, Sample):
    """graphs/hello.yaml: math_equal returns {score, acc, pred, gt} and the graph sets no reward.key;
    slime needs one number per sample (every rollout raised SlimeConfigError before the default)."""
    from slime_testkit import REPO

    slime_kit.compile(REPO / "graphs" / "hello.yaml")
    assert slime_kit.plan.reward.key == "score"
    eng = slime_kit.engine([r"So \boxed{4}."])
    got = slime_kit.run(slime_kit.target({"policy": eng}), _sample(Sample, "What is 2 + 2?", "4"), ArgsStandIn())
    assert got.reward == 1.0 and got.status == ST.COMPLETED


def test_args_converted_again_only_when_an_attribute_changed(slime_kit, monkeypatch):
    """slime passes one args object to every generate call: it is converted once, and again after an
    attribute is set, replaced or removed (here the router's address, which names the policy's URL)."""
    from graphrl.compilers.slime import adapter

    slime_kit.compile("fanout")
    made = []
    engines = _fanout_engines(slime_kit)
    target = adapter.SlimeTarget(
        slime_kit.out / "plan.json",
        tokenizer_loader=lambda p: slime_kit.tok,
        engine_factory=lambda name, url, cfg: made.append((name, url)) or engines[name],
    )
    conversions = []
    real = adapter.from_args
    monkeypatch.setattr(adapter, "from_args", lambda args, plan: conversions.append(1) or real(args, plan))
    args = _fanout_args(sglang_router_ip="10.0.0.1", sglang_router_port=30000)
    for index in range(3):
        slime_kit.run(target, _sample(SampleStandIn, index=index), args)
    assert len(conversions) == 1 and ("policy", "http://10.0.0.1:30000") in made
    args.sglang_router_port = 30001
    slime_kit.run(target, _sample(SampleStandIn, index=3), args)
    assert len(conversions) == 2 and ("policy", "http://10.0.0.1:30001") in made
    del args.sglang_router_port  # the graph's own url then, or the error naming the missing router
    with pytest.raises(SlimeConfigError, match="sglang_router_ip/sglang_router_port"):
        slime_kit.run(target, _sample(SampleStandIn, index=4), args)
    assert len(conversions) == 3
