"""Rows of docs/slime.md's flags table that act around generate, with the stand-in Sample: slime's
external engines (--rollout-external-engine-addrs: the args slime sets then) and slime's sample
filters over fan-out groups (--rollout-sample-filter-path: remove_sample set after generate).
Their real-slime counterparts are in test_slime_real_modes.py.
"""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner
from slime_standin import ArgsStandIn, SampleStandIn
from slime_testkit import REPO

from graphrl.cli import main
from graphrl.compilers.slime.adapter import SlimeTarget
from graphrl.compilers.slime.config import SlimeConfigError
from graphrl.errors import EXIT_USAGE


def _external_args(**kw):
    """What slime's start_external_rollout_servers leaves on args: its own router in front of the external
    engines, and sglang_model_routers with one entry, "default" (no model of an --sglang-config)."""
    return ArgsStandIn(
        rollout_external_engine_addrs=["10.1.1.1:30000", "10.1.1.2:30000"],
        rollout_external=True,
        sglang_router_ip="10.0.0.7",
        sglang_router_port=3456,
        sglang_model_routers={"default": ("10.0.0.7", 3456)},
        **kw,
    )


def test_external_engines_are_reached_through_slimes_router(slime_kit):
    slime_kit.compile("single")
    urls: dict[str, str] = {}
    engine = slime_kit.engine(["Paris"])

    def factory(name, url, cfg):
        urls[name] = url
        return engine

    target = SlimeTarget(slime_kit.out / "plan.json", engine_factory=factory, tokenizer_loader=lambda p: slime_kit.tok)
    got = slime_kit.run(
        target,
        SampleStandIn(prompt="What is the capital of France?", label="Paris", index=1),
        _external_args(),
    )
    assert urls == {"policy": "http://10.0.0.7:3456"}  # the router slime started, never an engine address
    assert got.reward == 1.0 and len(engine.requests) == 1


def test_external_engines_refuse_models_slime_would_serve(slime_kit):
    slime_kit.compile("fanout")  # helper: serve: (slime would serve it from --sglang-config)
    target = slime_kit.target({"policy": slime_kit.engine(["x"])})
    args = _external_args(custom_reward_post_process_path="graphrl_fanout.post_process_rewards")
    with pytest.raises(SlimeConfigError, match=r"serve helper \(serve:\).*--rollout-external-engine-addrs"):
        slime_kit.run(target, SampleStandIn(prompt="q", index=1), args)


def test_external_engines_with_served_models_are_a_usage_error_at_launch(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    slime = tmp_path / "slime"
    (slime / "scripts" / "models").mkdir(parents=True)
    (slime / "train.py").write_text("")
    (tmp_path / "d.jsonl").write_text('{"prompt": "q", "label": "a"}\n')
    argv = [
        "launch",
        "tests/compilers/slime/graphs/fanout.yaml",
        "--slime-dir",
        str(slime),
        "--hf-checkpoint",
        str(tmp_path),
        "--data",
        str(tmp_path / "d.jsonl"),
        "--out",
        str(tmp_path / "out"),
        "--dry-run",
        "--",
        "--rollout-external-engine-addrs",
        "10.1.1.1:30000",
    ]
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == EXIT_USAGE and "--rollout-external-engine-addrs" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_sample_filter_removing_rollouts_leaves_the_fanout_normalisation_alone(slime_kit):
    """slime runs --rollout-sample-filter-path before the reward post-process; its remove_sample only takes
    samples out of the loss ("does not determine whether the sample participates in advantage
    normalization", slime's help). graphrl's post-process keeps that: same values with or without."""
    slime_kit.compile("fanout")
    answers = iter(["Paris", "Rome"])  # rollout 0 right, rollout 1 wrong: a group with signal
    samples = []
    for index in (0, 1):
        answer = next(answers)
        engines = {
            "policy": slime_kit.engine(lambda p, i, a=answer: a if p.count("Answer") else f"draft {i}"),
            "critic": slime_kit.engine(["yes"]),
            "helper": slime_kit.engine(["think of rivers"]),
        }
        args = ArgsStandIn(
            sglang_model_routers={"helper": ("10.0.0.9", 31000)},
            custom_reward_post_process_path="graphrl_fanout.post_process_rewards",
        )
        prompt = SampleStandIn(prompt="Capital of France?", label="Paris", index=index, group_index=0)
        samples += slime_kit.run(slime_kit.target(engines), prompt, args)
    target = slime_kit.target({})
    before = target.post_process_rewards(args, samples)
    filtered = copy.deepcopy(samples)
    for s in filtered:  # what slime_tools.remove_odd_rollouts does to a fan-out group
        s.remove_sample = bool(s.index % 2)
    after = target.post_process_rewards(args, filtered)
    assert after == before and before[1][0] > 0 > before[1][-1]
