"""ToolOrchestra's group reward `preference` (graphrl.rewards.group) and its runner hook (group_run),
checked against numbers worked out by hand in the comments."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.rewards.group import GroupScores, oriented_features, preference
from graphrl.rewards.group_run import group_reward_hook, scalar
from graphrl.runtime.executor import RolloutResult
from graphrl.runtime.ledger import CallRecord, Span, TrainingSample

REPO = Path(__file__).resolve().parents[2]
SIGNS = {"cost": -1, "latency": -1, "expert_calls": 1}

# Four rollouts of one prompt (the ToolOrchestra shape: usage from the calls, expert_calls from state).
#            correct  cost   latency  expert_calls
#   r0       yes      0.02   4.0      {expert-1: 1}
#   r1       yes      0.01   6.0      {expert-1: 2, expert-2: 1}
#   r2       no       0.005  2.0      {}
#   r3       yes      0.04   8.0      {expert-2: 1}
ROLLOUTS = [
    (True, 0.02, 4.0, {"expert-1": 1}),
    (True, 0.01, 6.0, {"expert-1": 2, "expert-2": 1}),
    (False, 0.005, 2.0, {}),
    (True, 0.04, 8.0, {"expert-2": 1}),
]
WEIGHTS = {"accuracy": 1, "cost": 0.5, "latency": 0.25, "expert-1": 0.2}  # expert-2: no weight


def features():
    return [
        oriented_features({"cost": c, "latency_s": lat}, {"expert_calls": calls}, SIGNS)
        for _, c, lat, calls in ROLLOUTS
    ]


def test_features_are_oriented_so_that_higher_is_better():
    assert features()[1] == {"cost": -0.01, "latency": -6.0, "expert-1": 2.0, "expert-2": 1.0}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "calls": {"a": 2, "b": 1}}
    assert oriented_features(usage, {"steps": 3}, {"prompt_tokens": -1, "calls": 1, "steps": 2}) == {
        "prompt_tokens": -10.0,
        "calls": 3.0,
        "steps": 6.0,
    }
    assert oriented_features({"cost": 1.5, "latency_s": 2.0}, {}) == {"cost": -1.5, "latency": -2.0}  # default signs
    with pytest.raises(ValueError, match="unknown feature 'tokens'"):
        oriented_features({}, {}, {"tokens": -1})


def test_preference_hand_computed():
    # min-max over the group, oriented values (higher is better):
    #   cost    -0.02 -0.01 -0.005 -0.04   range 0.035 -> 4/7, 6/7, 1, 0
    #   latency -4    -6    -2     -8      range 6     -> 2/3, 1/3, 1, 0
    #   expert-1  1    2     0      0                  -> 1/2, 1,   0, 0
    # preference (wrong -> 0; accuracy is 1 for every correct rollout after min-max):
    #   r0 = 1 + 0.5*4/7 + 0.25*2/3 + 0.2*1/2 = 1.552381
    #   r1 = 1 + 0.5*6/7 + 0.25*1/3 + 0.2*1   = 1.711905
    #   r2 = 0
    #   r3 = 1 + 0     + 0          + 0       = 1.0
    # mean 1.066071, population std 0.669789, z = (p - mean) / std
    s = preference([ok for ok, *_ in ROLLOUTS], features(), weights=WEIGHTS)
    assert s.preference == pytest.approx([1.552381, 1.711905, 0.0, 1.0], abs=1e-6)
    assert s.mean == pytest.approx(1.066071, abs=1e-6) and s.std == pytest.approx(0.669789, abs=1e-6)
    assert s.rewards == pytest.approx([0.726063, 0.964233, -1.591652, -0.098645], abs=1e-6)
    assert not s.dropped
    assert sum(s.rewards) == pytest.approx(0.0, abs=1e-12)


def test_lower_cost_wins_among_equally_correct_rollouts():
    s = preference([True, True], [{"cost": -0.1}, {"cost": -0.3}], weights={"accuracy": 1, "cost": 1})
    # accuracy does not vary (both 1) -> 0; cost normalises to 1 (cheaper) and 0
    # preferences 1 and 0, mean 0.5, std 0.5 -> z +1, -1
    assert s.preference == (1.0, 0.0) and s.rewards == (1.0, -1.0)


def test_z_scores_are_clipped():
    # 1 correct of 17: preferences 1, 0 x 16; mean 1/17, std sqrt(1/17 * 16/17) = 4/17
    # z = (16/17) / (4/17) = 4 -> clipped to 3; the wrong ones get -(1/17) / (4/17) = -0.25
    s = preference([True] + [False] * 16, [{}] * 17)
    assert s.rewards[0] == 3.0 and s.rewards[1:] == pytest.approx([-0.25] * 16)
    assert preference([True] + [False] * 16, [{}] * 17, clip=5).rewards[0] == pytest.approx(4.0)


@pytest.mark.parametrize(
    "correct,feats,weights",
    [
        ([True, True, True], [{"cost": -1.0}] * 3, None),  # identical rollouts: std 0
        ([False, False], [{"cost": -1.0}, {"cost": -2.0}], None),  # all wrong: all 0
        ([True, True], [{"cost": -1.0}, {"cost": -2.0}], {"accuracy": 1, "cost": 0.1}),  # prefs 1.1, 1.0: std 0.05
    ],
)
def test_flat_groups_are_dropped(correct, feats, weights):
    s = preference(correct, feats, weights=weights)
    assert s.dropped and s.std <= 0.1 and set(s.rewards) == {0.0}


def test_a_feature_that_does_not_vary_counts_zero():
    # cost is the same for both: no preference from it; accuracy 1 vs 0 decides
    s = preference([True, False], [{"cost": -1.0}, {"cost": -1.0}], weights={"accuracy": 1, "cost": 5})
    assert s.preference == (1.0, 0.0)


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="weights must map"):
        preference([True], [{}], weights=[1, 0.5])
    with pytest.raises(ValueError, match="weights.cost must be a number"):
        preference([True], [{}], weights={"cost": "cheap"})
    with pytest.raises(ValueError, match="one feature mapping per rollout"):
        preference([True, False], [{}])


# ---------------------------------------------------------------- the runner hook


def _result(i: int, reward, cost: float, latency: float, calls: dict, samples: int) -> RolloutResult:
    span = Span(start=1, end=2, node="orchestrate", visit=1, mask=1, kind="generated")
    sample = TrainingSample(
        tokens=(1, 2),
        response_length=1,
        loss_mask=(1,),
        rollout_log_probs=(0.0,),
        spans=(span,),
        rollout_id=i,
        reward=reward,
    )
    records = (CallRecord("orchestrate", 1, "policy", 10, 5, latency_s=latency, cost=cost),)
    return RolloutResult(
        rollout_id=i,
        group=0,
        status="completed",
        reward=reward,
        samples=tuple(sample for _ in range(samples)),
        path=(),
        calls=records,
        error=None,
        state={"expert_calls": calls},
        elapsed_s=latency,
        engine_s=latency,
    )


def test_hook_replaces_rewards_and_broadcasts_them_to_every_turn():
    plan, _ = plan_from_path(REPO / "graphs" / "toolorchestra.yaml")
    row = {"prompt": "q", "label": "a", "metadata": {"pref_vec": WEIGHTS}}
    hook = group_reward_hook(plan, [row])
    results = [_result(i, float(ok), c, lat, calls, samples=i + 1) for i, (ok, c, lat, calls) in enumerate(ROLLOUTS)]
    out = hook(results)
    want = [0.726063, 0.964233, -1.591652, -0.098645]
    for res, before, z in zip(out, results, want):
        assert res.reward["score"] == pytest.approx(z, abs=1e-6)
        assert res.reward["rule"] == before.reward and res.reward["dropped"] is False
        assert [s.reward for s in res.samples] == pytest.approx([z] * len(before.samples), abs=1e-6)  # broadcast
    assert [r.reward["correct"] for r in out] == [1.0, 1.0, 0.0, 1.0]
    json.dumps([r.reward for r in out])  # trajectory lines stay JSON


def test_the_judges_calls_are_not_the_rollouts_cost():
    plan, _ = plan_from_path(REPO / "graphs" / "toolorchestra.yaml")
    hook = group_reward_hook(
        plan, [{"prompt": "q", "label": "a", "metadata": {"pref_vec": {"accuracy": 1, "cost": 1}}}]
    )
    judged = _result(1, 1.0, 0.1, 1.0, {}, samples=1)
    judged = dataclasses.replace(
        judged, calls=judged.calls + (CallRecord("reward", 1, "Qwen/Qwen3-32B", 500, 9, latency_s=3.0, cost=5.0),)
    )
    cheaper = _result(0, 1.0, 0.2, 1.0, {}, samples=1)
    out = hook([cheaper, judged])
    # without the judge's 5.0 the judged rollout (0.1) is the cheaper one: preferences 0, 1
    assert [r.reward["preference"] for r in out] == [0.0, 1.0]


def test_hook_even_credit_and_failed_rollouts():
    plan, _ = plan_from_path(REPO / "graphs" / "toolorchestra.yaml")
    plan = plan.model_copy(update={"reward": plan.reward.model_copy(update={"credit": "even"})})
    hook = group_reward_hook(plan, [{"prompt": "q", "label": "a", "metadata": {"pref_vec": {"accuracy": 1}}}])
    out = hook([_result(0, 1.0, 0.1, 1.0, {}, samples=4), _result(1, None, 0.1, 1.0, {}, samples=2)])
    # correct vs failed (reward None counts as wrong): preferences 1, 0 -> z +1, -1; even: / samples
    assert [s.reward for s in out[0].samples] == [0.25] * 4
    assert [s.reward for s in out[1].samples] == [-0.5] * 2


def test_hook_failure_is_recorded_not_raised():
    plan, _ = plan_from_path(REPO / "graphs" / "toolorchestra.yaml")
    hook = group_reward_hook(plan, [{"prompt": "q", "label": "a", "metadata": {"pref_vec": [1, 2]}}])
    out = hook([_result(0, 1.0, 0.1, 1.0, {}, samples=1)])
    assert out[0].reward == 1.0 and "weights must map" in out[0].error


def test_no_group_reward_no_hook():
    plan, _ = plan_from_path(REPO / "graphs" / "memagent.yaml")
    assert group_reward_hook(plan, []) is None


def test_user_group_function(tmp_path):
    (tmp_path / "my_group_rewards.py").write_text(
        "def rank(rewards, bonus):\n    return [(r or 0.0) + bonus * i for i, r in enumerate(rewards)]\n"
    )
    graph = tmp_path / "g.yaml"
    graph.write_text(
        "name: g\ninputs: {q: prompt}\nnodes:\n  a: {llm: policy, prompt: '{{ q }}'}\n"
        "reward:\n  fn: exact_match\n  args: {prediction: '{{ a.text }}', label: x}\n  credit: broadcast\n"
        "  group: {fn: 'my_group_rewards:rank', args: {bonus: '{{ row.metadata.bonus }}'}}\n"
    )
    plan, diags = plan_from_path(graph)
    assert plan is not None, diags
    hook = group_reward_hook(plan, [{"prompt": "q", "metadata": {"bonus": 0.5}}], [tmp_path])
    out = hook([_result(0, 1.0, 0, 0, {}, 1), _result(1, None, 0, 0, {}, 2)])
    assert [r.reward for r in out] == [1.0, 0.5] and [s.reward for s in out[1].samples] == [0.5, 0.5]


def test_scalar():
    assert scalar(None, None) == 0.0 and scalar(0.5, None) == 0.5
    assert scalar({"acc": 1, "score": 0.25}, "score") == 0.25 and scalar({"acc": 1, "x": 2}, None) == 1.0


def test_group_scores_is_frozen():
    s = preference([True, False], [{}, {}])
    assert isinstance(s, GroupScores) and math.isclose(s.std, 0.5)
    with pytest.raises(Exception):
        s.dropped = True  # type: ignore[misc]
