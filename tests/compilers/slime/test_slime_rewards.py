"""post_process_rewards: per prompt group, one reward per rollout, GRPO-normalised, then credited.

The uniform case (one sample per rollout, n per group) must equal slime's default normalisation
(slime/ray/rollout.py _post_process_rewards, re-computed here with torch as slime does); the fan-out
case must count each rollout once whatever its number of samples.
"""

from __future__ import annotations

import math

import pytest
from slime_standin import ArgsStandIn, SampleStandIn

from graphrl.compilers.lower import plan_from_path
from graphrl.compilers.slime.rewards import post_process

torch = pytest.importorskip("torch")


def _plan(name):
    from slime_testkit import GRAPHS

    plan, _ = plan_from_path(GRAPHS / f"{name}.yaml")
    return plan


def _rollout(group, rid, reward, n, credit="even", status="completed"):
    """The samples generate returns for one rollout (credited rewards, the rollout's in metadata)."""
    share = reward / n if credit == "even" else reward
    out = []
    for i in range(n):
        s = SampleStandIn(
            index=rid, group_index=group, rollout_id=rid, reward=share if status in ("completed", "truncated") else 0.0
        )
        s.metadata = {
            "graphrl": {
                "status": status,
                "num_samples": n,
                "credit": credit,
                "rollout_reward": reward if status in ("completed", "truncated") else None,
            }
        }
        out.append(s)
    return out


def _slime_default(raw, n_per_prompt, batch):
    rewards = torch.tensor(raw, dtype=torch.float)
    rewards = (
        rewards.reshape(-1, n_per_prompt)
        if rewards.shape[-1] == n_per_prompt * batch
        else rewards.view(-1, rewards.shape[-1])
    )
    rewards = rewards - rewards.mean(dim=-1, keepdim=True)
    rewards = rewards / (rewards.std(dim=-1, keepdim=True) + 1e-6)
    return rewards.flatten().tolist()


def test_uniform_groups_match_slimes_default():
    plan = _plan("single")
    values = [[1, 0, 0, 1], [0, 0, 0, 1], [1, 1, 1, 0]]
    samples = [s for g, rs in enumerate(values) for k, r in enumerate(rs) for s in _rollout(g, g * 4 + k, float(r), 1)]
    raw, norm = post_process(ArgsStandIn(), samples, plan)
    assert raw == [float(r) for rs in values for r in rs]
    assert norm == pytest.approx(_slime_default(raw, 4, 3), abs=1e-6)


def test_fanout_counts_each_rollout_once_and_credits_even():
    plan = _plan("fanout")  # credit: even
    # group 0: rollouts with 1, 3 and 2 samples, rewards 1, 0, 1; group 1: 5 samples vs 1 sample
    samples = (
        _rollout(0, 10, 1.0, 1)
        + _rollout(0, 11, 0.0, 3)
        + _rollout(0, 12, 1.0, 2)
        + _rollout(1, 20, 0.0, 5)
        + _rollout(1, 21, 1.0, 1)
    )
    raw, norm = post_process(ArgsStandIn(), samples, plan)
    assert raw == [1.0] + [0.0] * 3 + [1.0] * 2 + [0.0] * 5 + [1.0]  # the rollout's reward per sample
    g0 = torch.tensor([1.0, 0.0, 1.0])
    a0 = ((g0 - g0.mean()) / (g0.std() + 1e-6)).tolist()  # three rollouts, not six samples
    g1 = torch.tensor([0.0, 1.0])
    a1 = ((g1 - g1.mean()) / (g1.std() + 1e-6)).tolist()
    expected = [a0[0]] + [a0[1] / 3] * 3 + [a0[2] / 2] * 2 + [a1[0] / 5] * 5 + [a1[1]]
    assert norm == pytest.approx(expected, abs=1e-6)
    # per rollout, the credited advantages sum to the rollout's advantage: nothing multiplied by fan-out
    assert math.fsum(norm[1:4]) == pytest.approx(a0[1], abs=1e-6)


def test_broadcast_and_failed_rollouts_still_count():
    plan = _plan("fanout").model_copy(
        update={"reward": _plan("fanout").reward.model_copy(update={"credit": "broadcast"})}
    )
    samples = (
        _rollout(0, 1, 1.0, 2, "broadcast")
        + _rollout(0, 2, 0.0, 1, "broadcast", status="failed")
        + _rollout(0, 3, 1.0, 3, "broadcast")
    )
    raw, norm = post_process(ArgsStandIn(), samples, plan)
    g = torch.tensor([1.0, 0.0, 1.0])
    a = ((g - g.mean()) / (g.std() + 1e-6)).tolist()
    assert norm == pytest.approx([a[0]] * 2 + [a[1]] + [a[2]] * 3, abs=1e-6)
    assert raw[2] == 0.0


def test_estimators_and_single_rollout_groups():
    plan = _plan("single")
    samples = _rollout(0, 1, 0.7, 1) + _rollout(1, 2, 0.2, 1) + _rollout(1, 3, 0.4, 1)
    raw, norm = post_process(ArgsStandIn(advantage_estimator="reinforce_plus_plus"), samples, plan)
    assert norm == raw == [0.7, 0.2, 0.4]  # slime does not normalise this estimator
    _, norm = post_process(ArgsStandIn(), samples, plan)
    assert norm[0] == 0.0  # a group of one rollout carries no GRPO signal (slime's torch.std gives nan)
    _, norm = post_process(ArgsStandIn(grpo_std_normalization=False), samples, plan)
    assert norm == pytest.approx([0.0, -0.1, 0.1])


def test_dict_rewards_and_samples_scored_by_slime():
    plan = _plan("single")
    a = _rollout(0, 1, 1.0, 1)
    a[0].metadata["graphrl"]["rollout_reward"] = {"acc": 1.0, "len": 3.0}
    b = SampleStandIn(index=2, group_index=0, rollout_id=2, reward={"acc": 0.0})  # no graphrl metadata
    raw, norm = post_process(ArgsStandIn(reward_key="acc"), a + [b], plan)
    assert raw == [1.0, 0.0] and norm[0] > 0 > norm[1]
    with pytest.raises(ValueError, match="--reward-key"):
        post_process(ArgsStandIn(), a + [b], plan)


def _orchestra_rollout(group, rid, correct, cost, latency, expert_calls, n_turns, pref_vec):
    calls = [
        {
            "node": "orchestrate",
            "visit": 1,
            "endpoint": "policy",
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "latency_s": latency,
            "cost": cost,
            "finish_reason": "stop",
        }
    ]
    out = _rollout(group, rid, 1.0 if correct else 0.0, n_turns, "broadcast")
    out[0].metadata["graphrl"].update(rollout_calls=calls, state={"expert_calls": expert_calls})
    for s in out:
        s.metadata["pref_vec"] = pref_vec
    return out


def test_toolorchestra_preference_group_reward():
    """The bundled ToolOrchestra graph: preference over each prompt group (graphrl.rewards.group), from
    the rollouts' correctness, usage and state stored by generate, then per-group normalisation."""
    from graphrl.compilers.lower import plan_from_path as load
    from graphrl.rewards.group import oriented_features, preference

    plan, _ = load("graphs/toolorchestra.yaml")
    weights = {"accuracy": 1, "cost": 0.5, "latency": 0.25, "expert-1": 0.2}
    data = [
        (True, 0.02, 4.0, {"expert-1": 1}, 2),
        (True, 0.01, 6.0, {"expert-1": 2, "expert-2": 1}, 3),
        (False, 0.005, 2.0, {}, 1),
        (True, 0.04, 8.0, {"expert-2": 1}, 2),
    ]
    samples = [
        s for k, (ok, c, lat, ex, n) in enumerate(data) for s in _orchestra_rollout(0, k, ok, c, lat, ex, n, weights)
    ]
    raw, norm = post_process(ArgsStandIn(), samples, plan)
    feats = [
        oriented_features(
            {"cost": c, "latency_s": lat}, {"expert_calls": ex}, {"cost": -1, "latency": -1, "expert_calls": 1}
        )
        for _, c, lat, ex, _ in data
    ]
    scores = preference([d[0] for d in data], feats, weights=weights, clip=3, min_std=0.1).rewards
    g = torch.tensor(scores)
    adv = ((g - g.mean()) / (g.std() + 1e-6)).tolist()
    expected = [a for a, d in zip(adv, data) for _ in range(d[4])]  # broadcast to every turn
    assert norm == pytest.approx(expected, abs=1e-6)
    assert raw == [float(d[0]) for d in data for _ in range(d[4])]


def test_user_group_reward_function(tmp_path):
    (tmp_path / "mygroup.py").write_text(
        "def rank(rewards, bonus=0.0):\n    return [2.0 * (r or 0.0) + bonus for r in rewards]\n"
    )
    plan = _plan("single")
    from graphrl.spec.model import GroupReward

    plan = plan.model_copy(
        update={"reward": plan.reward.model_copy(update={"group": GroupReward(fn="mygroup:rank", args={"bonus": 1.0})})}
    )
    samples = _rollout(0, 1, 1.0, 1) + _rollout(0, 2, 0.0, 1) + _rollout(0, 3, 1.0, 1)
    _, norm = post_process(ArgsStandIn(grpo_std_normalization=False, graphrl_source_dir=str(tmp_path)), samples, plan)
    assert norm == pytest.approx([2 / 3, -4 / 3, 2 / 3])  # 3, 1, 3 centred


def _roles_rollout(group, rid, own):
    """A multi-agent rollout: one sample per (role, own reward), the rollout reward stored too."""
    out = []
    for role, value in own:
        s = SampleStandIn(index=rid, group_index=group, rollout_id=rid, reward=value)
        s.metadata = {
            "graphrl": {
                "status": "completed",
                "num_samples": len(own),
                "credit": "even",
                "rollout_reward": 1.0,
                "own_reward": value,
                "role": role,
            }
        }
        out.append(s)
    return out


def test_node_rewards_are_normalised_per_role_within_the_group():
    plan = _plan("fanout")
    a = _roles_rollout(0, 1, [("solve", 1.0), ("solve", 0.0), ("select", 1.0)])
    b = _roles_rollout(0, 2, [("solve", 1.0), ("solve", 1.0), ("select", 0.0)])
    c = _roles_rollout(1, 3, [("solve", 0.5), ("select", 0.0)])  # another prompt: its own groups
    raw, norm = post_process(ArgsStandIn(), a + b + c, plan)
    assert raw == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.0]  # each sample's own reward
    solve = torch.tensor([1.0, 0.0, 1.0, 1.0])
    s_adv = ((solve - solve.mean()) / (solve.std() + 1e-6)).tolist()
    select = torch.tensor([1.0, 0.0])
    c_adv = ((select - select.mean()) / (select.std() + 1e-6)).tolist()
    expected = [s_adv[0], s_adv[1], c_adv[0], s_adv[2], s_adv[3], c_adv[1], 0.0, 0.0]  # groups of one -> 0
    assert norm == pytest.approx(expected, abs=1e-6)
