"""On-policy distillation from a teacher the graph declares (graphrl/compilers/slime/teacher.py), with
the stand-in Sample and a scripted teacher double: the exact ids each teacher call gets, the exact
slice stored in `teacher_log_probs` (slime's layout: one per response token, observations included),
faults, refusals, and the launch flags.
"""

from __future__ import annotations

import asyncio

import pytest
import yaml
from slime_standin import ArgsStandIn, SampleStandIn, SampleStandInNoAppend
from slime_testkit import GRAPHS

from graphrl.compilers.slime.adapter import SlimeTarget
from graphrl.compilers.slime.config import SlimeConfigError
from graphrl.compilers.slime.emit import slime_flags
from graphrl.engines.base import EngineError, ScoresTokens

BOTH = pytest.mark.parametrize("Sample", [SampleStandIn, SampleStandInNoAppend], ids=["append", "direct"])
ST = SampleStandIn.Status
OPD = {"use_opd": True, "opd_type": "sglang"}


class TeacherDoubleForTests:
    """A scripted teacher: log p(token at position i) = -(token % 101) / 100 - i / 1000, so every stored
    value says which token and which position it was computed for. Records each call; `fail` raises."""

    def __init__(self, fail: str | None = None):
        self.calls: list[dict] = []
        self.fail = fail

    @staticmethod
    def logprob(token: int, position: int) -> float:
        return -(token % 101) / 100 - position / 1000

    async def token_logprobs(self, input_ids, start, sampling_params, *, session_id=None):
        ids = list(input_ids)
        self.calls.append({"ids": ids, "start": start, "params": dict(sampling_params), "session_id": session_id})
        if self.fail:
            raise EngineError(self.fail)
        return tuple(self.logprob(t, i) for i, t in enumerate(ids) if i >= start)

    async def generate(self, *a, **kw):  # a teacher used by no node is never asked to generate
        raise AssertionError("the teacher was asked to generate")

    async def close(self):
        pass


def _sample(Sample, index=7):
    return Sample(
        prompt="What is the capital of France?", label="Paris", index=index, group_index=3, session_id="sess-7"
    )


def _distill(slime_kit, teacher, script=("I will look.", "A hint.", "Paris")):
    slime_kit.compile("distill")
    return slime_kit.target({"policy": slime_kit.engine(list(script)), "teacher": teacher})


def test_the_double_is_a_scorer():
    assert isinstance(TeacherDoubleForTests(), ScoresTokens)


@BOTH
def test_teacher_scores_the_exact_ids_and_every_response_token(slime_kit, Sample):
    teacher = TeacherDoubleForTests()
    got = slime_kit.run(_distill(slime_kit, teacher), _sample(Sample), ArgsStandIn(**OPD))
    n = got.response_length
    prompt_len = len(got.tokens) - n
    assert teacher.calls == [
        {
            "ids": got.tokens,  # the sample's exact ids: prompt + response, as trained
            "start": prompt_len,  # the response tokens' log-probs, nothing of the prompt
            "params": {"temperature": 1.0, "skip_special_tokens": False},
            "session_id": "sess-7",
        }
    ]
    expected = [TeacherDoubleForTests.logprob(t, prompt_len + j) for j, t in enumerate(got.tokens[-n:])]
    assert got.teacher_log_probs == expected  # one per response token, aligned with it
    assert len(got.teacher_log_probs) == n == len(got.loss_mask) == len(got.rollout_log_probs)
    masked = [j for j, m in enumerate(got.loss_mask) if m == 0]
    assert masked and all(got.teacher_log_probs[j] != 0.0 for j in masked)  # observations scored too, as slime does
    assert got.status == ST.COMPLETED and got.reward == 1.0 and got.remove_sample is False  # the graph's reward stays


def test_teacher_uses_the_rollout_temperature(slime_kit):
    teacher = TeacherDoubleForTests()
    sampling = {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 64}
    slime_kit.run(_distill(slime_kit, teacher), _sample(SampleStandIn), ArgsStandIn(**OPD), sampling=sampling)
    assert teacher.calls[0]["params"]["temperature"] == 0.7  # slime's OPD scores at --rollout-temperature


def test_a_failing_teacher_fails_the_rollout_cleanly(slime_kit):
    teacher = TeacherDoubleForTests(fail="HTTP 503 from the teacher")
    got = slime_kit.run(_distill(slime_kit, teacher), _sample(SampleStandIn), ArgsStandIn(**OPD))
    assert got.status == ST.FAILED and got.remove_sample is True and got.reward == 0.0
    assert got.teacher_log_probs == [0.0] * got.response_length  # well-formed: slime collects it from every sample
    info = got.metadata["graphrl"]
    assert info["status"] == "failed" and info["rollout_reward"] is None
    assert info["error"] == "teacher 'teacher': EngineError: HTTP 503 from the teacher"


def test_a_failed_rollout_is_not_scored(slime_kit):
    teacher = TeacherDoubleForTests()
    target = _distill(slime_kit, teacher, script=("I will look.",))  # the policy has no second reply
    got = slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(**OPD))
    assert got.status == ST.FAILED and teacher.calls == []
    assert got.teacher_log_probs == [0.0] * got.response_length


def test_eval_asks_no_teacher(slime_kit):
    teacher = TeacherDoubleForTests()
    got = slime_kit.run(_distill(slime_kit, teacher), _sample(SampleStandIn), ArgsStandIn(**OPD), evaluation=True)
    assert teacher.calls == [] and getattr(got, "teacher_log_probs", None) is None


def _fanout_with_teacher(slime_kit):
    spec = yaml.safe_load((GRAPHS / "fanout.yaml").read_text())
    spec["models"]["mentor"] = {"url": "http://127.0.0.1:39997"}
    spec["slime"] = {"teacher": "mentor"}
    path = slime_kit.tmp / "fanout_teacher.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    slime_kit.compile(path, out="fanout_teacher")


def test_fanout_every_sample_gets_its_own_slice(slime_kit):
    _fanout_with_teacher(slime_kit)
    teacher = TeacherDoubleForTests()
    engines = {
        "policy": slime_kit.engine(lambda p, i: "Paris" if p.count("Answer") else f"draft {i}"),
        "critic": slime_kit.engine(["no", "yes"]),
        "helper": slime_kit.engine(["think of rivers"]),
        "mentor": teacher,
    }
    args = ArgsStandIn(
        sglang_model_routers={"helper": ("10.0.0.9", 31000)},
        custom_reward_post_process_path="graphrl_fanout.post_process_rewards",
        **OPD,  # fan-out with the graph's teacher: accepted (slime's OPD post-process is not used)
    )
    out = slime_kit.run(slime_kit.target(engines), _sample(SampleStandIn, index=11), args)
    assert len(out) == 3 and len(teacher.calls) == 3
    assert sorted(tuple(c["ids"]) for c in teacher.calls) == sorted(tuple(s.tokens) for s in out)
    for s in out:
        call = next(c for c in teacher.calls if c["ids"] == s.tokens)
        assert call["start"] == len(s.tokens) - s.response_length
        assert s.teacher_log_probs == [
            TeacherDoubleForTests.logprob(t, call["start"] + j) for j, t in enumerate(s.tokens[-s.response_length :])
        ]


@pytest.mark.parametrize(
    "flags, fragment",
    [
        ({"use_opd": False, "opd_type": None}, "without --use-opd"),
        ({"use_opd": True, "opd_type": "megatron"}, "megatron"),
    ],
)
def test_a_declared_teacher_needs_opd_sglang(slime_kit, flags, fragment):
    target = _distill(slime_kit, TeacherDoubleForTests())
    with pytest.raises(SlimeConfigError, match=rf"slime.teacher 'teacher'.*{fragment}.*--use-opd --opd-type sglang"):
        slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(**flags))


def test_a_teacher_with_another_vocabulary_is_refused(slime_kit, qwen_tok):
    spec = yaml.safe_load((GRAPHS / "distill.yaml").read_text())
    spec["models"]["teacher"]["tokenizer"] = "/models/other-family"
    path = slime_kit.tmp / "distill_vocab.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = slime_kit.compile(path, out="vocab")

    class OtherTokenizerForTests:
        def get_vocab(self):
            return {"<s>": 0, "hello": 1}

    def load(path):
        return OtherTokenizerForTests() if path == "/models/other-family" else qwen_tok

    def target(loader):
        engines = {"policy": slime_kit.engine(["I will look.", "A hint.", "Paris"]), "teacher": TeacherDoubleForTests()}
        return SlimeTarget(out / "plan.json", engine_factory=lambda n, u, c: engines[n], tokenizer_loader=loader)

    with pytest.raises(SlimeConfigError, match=r"teacher model 'teacher' uses another vocabulary.*same tokenizer"):
        slime_kit.run(target(load), _sample(SampleStandIn), ArgsStandIn(**OPD))
    same = slime_kit.run(target(lambda p: qwen_tok), _sample(SampleStandIn), ArgsStandIn(**OPD))
    assert len(same.teacher_log_probs) == same.response_length  # another directory, the same vocabulary: fine


def test_the_launch_command_turns_opd_on(slime_kit, tmp_path):
    slime_kit.compile("distill")
    flags = slime_flags(slime_kit.plan, tmp_path)
    at = flags.index("--use-opd")
    assert flags[at : at + 3] == ["--use-opd", "--opd-type", "sglang"]
    slime_kit.compile("single", out="single")
    assert "--use-opd" not in slime_flags(slime_kit.plan, tmp_path)


def test_scoring_runs_concurrently_with_other_rollouts(slime_kit):
    """Two rollouts on one event loop: each sample is scored once, with its own ids."""
    teacher = TeacherDoubleForTests()
    target = _distill(slime_kit, teacher, script=("I will look.", "A hint.", "Paris") * 2)

    async def both():
        a, b = _sample(SampleStandIn, index=1), _sample(SampleStandIn, index=2)
        params = {"temperature": 1.0}
        return await asyncio.gather(
            target.generate(ArgsStandIn(**OPD), a, params), target.generate(ArgsStandIn(**OPD), b, params)
        )

    a, b = asyncio.run(both())
    assert sorted(tuple(c["ids"]) for c in teacher.calls) == sorted([tuple(a.tokens), tuple(b.tokens)])


def test_a_rollout_without_samples_gets_a_zero_placeholder(slime_kit):
    teacher = TeacherDoubleForTests()
    target = _distill(slime_kit, teacher, script=())  # the first policy call fails: no training sample
    got = slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn(**OPD))
    assert got.metadata["graphrl"].get("placeholder") is True and got.response_length == 1
    assert got.teacher_log_probs == [0.0] and teacher.calls == []


def test_a_sample_coming_back_under_partial_rollout_is_scored_afresh(slime_kit):
    teacher = TeacherDoubleForTests()
    target = _distill(slime_kit, teacher, script=("I will look.", "A hint.", "Paris") * 2)
    args = ArgsStandIn(partial_rollout=True, **OPD)
    first = slime_kit.run(target, _sample(SampleStandIn), args)
    first.status, first.teacher_log_probs = ST.ABORTED, [9.9] * first.response_length  # as if aborted mid-way
    again = slime_kit.run(target, first, args)
    n = again.response_length
    assert again.teacher_log_probs == [
        TeacherDoubleForTests.logprob(t, len(again.tokens) - n + j) for j, t in enumerate(again.tokens[-n:])
    ]
    assert teacher.calls[-1]["ids"] == again.tokens


def test_the_compiled_readme_names_the_teacher(slime_kit):
    out = slime_kit.compile("distill")
    assert "generate fills teacher_log_probs from model 'teacher'" in (out / "README.md").read_text()
    out = slime_kit.compile("single", out="single")
    assert "teacher_log_probs" not in (out / "README.md").read_text()
