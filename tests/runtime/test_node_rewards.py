"""Node rewards (`reward:` on an llm node): each visit scored right after it, its sample trains on it
(own / times / plus the rollout's reward), the other samples share the rollout's reward among
themselves, `output.reward` is bound for update/next, and a failing node reward fails the rollout."""

from __future__ import annotations

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.runtime.outcome import settle

GRAPH = """
name: node_rewards
inputs:
  question: prompt
  answer: label
nodes:
  draft:
    llm: policy
    prompt: "Draft: {{ question }}"
    reward: {fn: exact_match, args: {prediction: "{{ output.text }}", label: "{{ answer }}"}}
    next:
      - {when: "output.reward == 1", goto: end}
      - goto: revise
  revise:
    llm: policy
    prompt: "Revise: {{ draft.text }} (scored {{ draft.reward }})"
    next: final
  final:
    llm: policy
    prompt: "Final: {{ revise.text }}"
reward:
  fn: exact_match
  args: {prediction: "{{ final.text if final is defined else draft.text }}", label: "{{ answer }}"}
  credit: CREDIT
  node_rewards: MODE
"""


def _run(kit, replies, mode="own", credit="even", row=None):
    text = GRAPH.replace("CREDIT", credit).replace("MODE", mode)
    return kit.rollout(text, {"policy": kit.engine(replies)}, row or {"prompt": "2+2?", "label": "4"})


def test_own_mode(kit):
    res = _run(kit, ["5", "4", "4"])
    assert res.status == "completed" and res.reward == 1.0
    assert [n for n, _ in res.path] == ["draft", "revise", "final"]
    draft, revise, final = res.samples
    assert draft.reward == 0.0 and draft.metadata == {"own_reward": 0.0, "role": "draft"}
    assert revise.reward == final.reward == 0.5  # even credit among the two samples without their own
    assert "own_reward" not in final.metadata
    assert "(scored 0.0)" in kit.r.decode(revise.prompt_ids)  # output.reward bound after the visit


def test_output_reward_routes(kit):
    res = _run(kit, ["4"])
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["draft"] and res.samples[0].reward == 1.0


@pytest.mark.parametrize("mode, expected", [("times", 0.0 * 1.0), ("plus", 0.0 + 1.0)])
def test_times_and_plus_combine_with_the_rollout_reward(kit, mode, expected):
    res = _run(kit, ["5", "4", "4"], mode=mode)
    assert res.samples[0].reward == expected


def test_credit_last_never_drops_a_sample_that_has_its_own_reward(kit):
    res = _run(kit, ["5", "4", "4"], credit="last")
    plan, _ = plan_from_path(kit.dir / "g.yaml")
    out = settle(plan, res)
    removed = [o.remove for o in out.samples]
    assert removed == [False, True, False]  # draft (own reward) kept, revise superseded, final trains
    assert [o.reward for o in out.samples] == [0.0, 0.0, 1.0]


def test_a_failing_node_reward_fails_the_rollout_located(kit):
    kit.write("bad_reward.py", "def boom(text):\n    raise RuntimeError('scorer down')\n")
    text = GRAPH.replace(
        'fn: exact_match, args: {prediction: "{{ output.text }}", label: "{{ answer }}"}',
        "fn: 'bad_reward:boom', args: {text: \"{{ output.text }}\"}",
    )
    text = text.replace("CREDIT", "even").replace("MODE", "own")
    res = kit.rollout(text, {"policy": kit.engine(["5"])}, {"prompt": "2+2?", "label": "4"})
    assert res.status == "failed"
    assert "g.yaml:" in res.error and "reward of 'draft': RuntimeError: scorer down" in res.error


def test_a_failed_rollout_keeps_no_node_reward(kit):
    """A rollout that fails after a node reward was given: like its other samples, the scored one
    carries no reward (a failed rollout is rewarded nothing), and slime's outcome writes 0, removed."""
    text = GRAPH.replace("CREDIT", "even").replace("MODE", "own")
    text = text.replace('prompt: "Final: {{ revise.text }}"', 'prompt: "Final: {{ revise.text.nope() }}"')
    res = kit.rollout(text, {"policy": kit.engine(["5", "4"])}, {"prompt": "2+2?", "label": "4"})
    assert res.status == "failed", res.error
    assert [n for n, _ in res.path] == ["draft", "revise", "final"]
    assert len(res.samples) == 2 and [s.reward for s in res.samples] == [None, None]
    plan, _ = plan_from_path(kit.dir / "g.yaml")
    assert [(o.reward, o.remove) for o in settle(plan, res).samples] == [(0.0, True), (0.0, True)]
