"""Per-node rollout metrics for slime's logs (graphrl/compilers/slime/metrics.py), from samples generate filled."""

from __future__ import annotations

import pytest
from slime_standin import ArgsStandIn, SampleStandIn
from slime_testkit import REPO

from graphrl.compilers.slime.metrics import eval_node_metrics, node_metrics


def _fanout_rollouts(slime_kit, answers):
    from test_slime_contract import _fanout_args, _fanout_engines

    slime_kit.compile("fanout")
    flat = []
    for k, answer in enumerate(answers):
        target = slime_kit.target(_fanout_engines(slime_kit, answer=answer))
        sample = SampleStandIn(prompt="Capital of France?", label="Paris", index=k, group_index=0)
        flat += slime_kit.run(target, sample, _fanout_args())
    return target, flat


def test_node_metrics_of_a_fanout_step(slime_kit):
    target, flat = _fanout_rollouts(slime_kit, ["Paris", "Lyon"])
    m = node_metrics(flat)
    assert m["graphrl/rollouts"] == 2.0 and m["graphrl/status/completed"] == 1.0
    assert m["graphrl/reward_mean"] == 0.5  # 1.0 and 0.0: uncredited, once per rollout
    # each rollout: hint once, draft twice, judge twice, answer once (the critic says no, then yes)
    assert m["graphrl/node/draft/visits"] == 2.0 and m["graphrl/node/answer/visits"] == 1.0
    assert m["graphrl/node/judge/visits"] == 2.0 and m["graphrl/node/hint/visits"] == 1.0
    drafts = [s for s in flat if s.metadata["graphrl"]["spans"][0]["node"] == "draft"]
    assert m["graphrl/node/draft/generated_tokens"] == sum(s.response_length for s in drafts) / 2
    assert m["graphrl/node/draft/trained_tokens"] == m["graphrl/node/draft/generated_tokens"]
    assert m["graphrl/node/judge/trained_tokens"] == 0.0  # the critic is a frozen model: no sample
    assert m["graphrl/node/judge/latency_s"] >= 0.0 and "graphrl/node/judge/tool_error_rate" not in m


def test_tool_error_rate_and_skipped_foreign_samples(slime_kit):
    from test_slime_contract import _sample

    slime_kit.compile("multiturn")
    target = slime_kit.target({"policy": slime_kit.engine(["I will look.", "A hint.", "Paris"])})
    got = slime_kit.run(target, _sample(SampleStandIn), ArgsStandIn())
    m = node_metrics([got, SampleStandIn(prompt="not graphrl's")])
    assert m["graphrl/rollouts"] == 1.0 and m["graphrl/node/look/tool_error_rate"] == 0.0
    assert m["graphrl/node/hint/generated_tokens"] > 0 and m["graphrl/node/hint/trained_tokens"] == 0  # train: false
    assert node_metrics([SampleStandIn(prompt="x")]) == {}


def test_log_hooks_add_to_slimes_own_log_dict(slime_kit):
    target, flat = _fanout_rollouts(slime_kit, ["Paris"])
    extra = {"dynamic_filter/drop": 0.0}
    assert target.log_rollout(3, ArgsStandIn(), flat, extra, 1.5) is False  # slime still logs the rest
    assert extra["graphrl/node/draft/visits"] == 2.0 and extra["dynamic_filter/drop"] == 0.0
    data = {"rivers": {"rewards": [1.0], "samples": flat[-1:]}}
    extra = {}
    assert target.log_eval_rollout(3, ArgsStandIn(), data, extra) is False
    assert extra["eval/rivers/graphrl/rollouts"] == 1.0
    assert eval_node_metrics({"x": {"samples": []}}) == {}


@pytest.mark.parametrize("name", ["log_rollout", "log_eval_rollout"])
def test_the_compiled_module_has_the_log_hooks(slime_kit, name):
    import importlib.util

    out = slime_kit.compile("single")
    spec = importlib.util.spec_from_file_location("compiled_single_logs", out / "graphrl_single.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert callable(getattr(mod, name))
    assert f"graphrl_single.{name}" in (out / "launch.sh").read_text()


def test_node_rewards_reach_slime_per_sample_with_their_role_and_metrics(slime_kit):
    """graphs/multi_agent.yaml through the compiled generate: every sample carries its own reward and
    role; the log has each role's mean own reward; the post-process normalises per role."""
    from graphrl.compilers.slime.rewards import post_process

    slime_kit.compile(REPO / "graphs" / "multi_agent.yaml")

    def reply(prompt: str, i: int) -> str:
        if "Judgment: N" in prompt:
            return "Judgment: 1"
        return "\\boxed{12}" if i % 2 == 0 else "\\boxed{13}"

    flat = []
    for k in range(2):
        target = slime_kit.target({"policy": slime_kit.engine(reply)})
        sample = SampleStandIn(prompt="What is 7 + 5?", label="12", index=k, group_index=0)
        flat += slime_kit.run(target, sample, ArgsStandIn(custom_reward_post_process_path="x.post_process_rewards"))
    infos = [s.metadata["graphrl"] for s in flat]
    assert [i["role"] for i in infos[:7]] == ["solve"] * 3 + ["rewrite"] * 3 + ["select"]
    # what trains is the node's reward times the final factor (0.8: the selected rewrite is wrong)
    assert all(s.reward == i["own_reward"] == pytest.approx(i["node_reward"] * 0.8) for s, i in zip(flat, infos))
    m = node_metrics(flat)
    for role in ("solve", "rewrite", "select"):
        values = [i["node_reward"] for i in infos if i["role"] == role]
        assert m[f"graphrl/node/{role}/reward_mean"] == pytest.approx(sum(values) / len(values))
    raw, norm = post_process(ArgsStandIn(), flat, slime_kit.plan)
    assert raw == [i["own_reward"] for i in infos]
    for role in ("solve", "rewrite", "select"):  # centred within each role: a solver against solvers
        assert sum(n for n, i in zip(norm, infos) if i["role"] == role) == pytest.approx(0.0, abs=1e-6)
