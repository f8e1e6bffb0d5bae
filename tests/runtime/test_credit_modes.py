"""Credit modes beyond even/broadcast: discounted and last (only the final attempt trains)."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import pytest

from graphrl.compilers.slime.rewards import post_process
from graphrl.runtime.ledger import FanoutError, assign_credit, check_fanout, credit_weights
from graphrl.runtime.outcome import settle


def test_credit_weights():
    assert credit_weights("even", 4) == (0.25,) * 4
    assert credit_weights("broadcast", 3) == (1.0, 1.0, 1.0)
    assert credit_weights("discounted", 3, 0.5) == (0.25, 0.5, 1.0)
    assert credit_weights("last", 3) == (0.0, 0.0, 1.0)
    assert assign_credit({"score": 2.0}, 2, "discounted", 0.5) == ({"score": 1.0}, {"score": 2.0})
    with pytest.raises(ValueError, match="credit mode"):
        credit_weights("first", 2)


GRAPH = """\
name: attempts
inputs: {question: prompt, answer: label}
nodes:
  attempt:
    llm: policy
    prompt: [{user: "{{ question }}"}]
    foreach: {over: "[1, 2, 3]"}
reward:
  fn: exact_match
  args: {prediction: "{{ attempt.text }}", label: "{{ answer }}"}
  credit: CREDIT
"""


def _run(kit, credit):
    plan = kit.plan(GRAPH.replace("CREDIT", credit))
    res = kit.run(kit.executor(plan, {"policy": kit.engine(["no", "no", "4"])}), {"prompt": "2+2", "label": "4"})
    assert res.status == "completed" and res.reward == 1.0, res.error
    return plan, res


def test_discounted_credit_gives_later_attempts_more(kit):
    plan, res = _run(kit, "discounted\n  discount: 0.5")
    assert [s.reward for s in res.samples] == [0.25, 0.5, 1.0]
    check_fanout(res.samples, 1.0, "discounted", 0.5)
    with pytest.raises(FanoutError):
        check_fanout(res.samples, 1.0, "even")


def test_last_credit_trains_only_the_final_attempt(kit):
    plan, res = _run(kit, "last")
    assert [s.reward for s in res.samples] == [0.0, 0.0, 1.0]
    outcome = settle(plan, res)
    assert [(so.reward, so.remove) for so in outcome.samples] == [(0.0, True), (0.0, True), (1.0, False)]


def test_the_slime_post_process_follows_the_credit_mode(kit):
    plan, res = _run(kit, "discounted\n  discount: 0.5")
    samples = []
    for rollout, reward in ((0, 1.0), (1, 0.0)):  # two rollouts of one prompt, three samples each
        for i in range(3):
            info = {
                "status": "completed",
                "rollout_reward": reward,
                "num_samples": 3,
                "credit": "discounted",
                "discount": 0.5,
                "sample_index": i,
            }
            samples.append(SimpleNamespace(rollout_id=rollout, group_index=0, reward=None, metadata={"graphrl": info}))
    args = Namespace(
        advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=False, reward_key=None
    )
    raw, out = post_process(args, samples, plan)
    assert raw == [1.0] * 3 + [0.0] * 3
    assert out == pytest.approx([0.125, 0.25, 0.5, -0.125, -0.25, -0.5])  # (+-0.5) x the discounted weights
