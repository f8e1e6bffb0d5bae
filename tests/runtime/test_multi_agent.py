"""graphs/multi_agent.yaml with canned replies: parallel solvers and rewriters and a selector, every
call its own sample with its own reward, times the final factor (slime's examples/multi_agent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphrl.compilers.lower import plan_from_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def plan():
    p, diags = plan_from_path(REPO / "graphs" / "multi_agent.yaml")
    assert p is not None, diags
    return p


def _engine(kit, solver, rewriter, selector):
    def reply(prompt: str, i: int) -> str:
        if "Judgment: N" in prompt:
            return selector
        if "Earlier solutions" in prompt:
            return rewriter.pop(0)
        return solver.pop(0)

    return kit.engine(reply)


def _run(kit, plan, solver, rewriter, selector):
    ex = kit.executor(plan, {"policy": _engine(kit, list(solver), list(rewriter), selector)})
    return kit.run(ex, {"prompt": "What is 7 + 5?", "label": "12"})


def test_every_sample_is_scored_on_its_own_then_scaled_by_the_final_choice(kit, plan):
    res = _run(
        kit,
        plan,
        ["It is \\boxed{12}.", "It is \\boxed{13}.", "It is \\boxed{12}."],
        ["So \\boxed{11}.", "So \\boxed{12}.", "So \\boxed{12}."],
        "The second is right.\nJudgment: 2",
    )
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["solve"] * 3 + ["rewrite"] * 3 + ["select"]
    assert res.reward == pytest.approx(1.2)  # the selected rewrite is right: the correct weight
    roles = [s.metadata["role"] for s in res.samples]
    assert roles == ["solve"] * 3 + ["rewrite"] * 3 + ["select"]
    own = [s.metadata["own_reward"] for s in res.samples]
    assert own == [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]  # the selector gets the reward of rewrite 2
    assert [s.reward for s in res.samples] == pytest.approx([o * 1.2 for o in own])
    assert {s.rollout_id for s in res.samples} == {0}
    prompts = [kit.r.decode(s.prompt_ids) for s in res.samples]
    assert "#### Solution 3\nIt is \\boxed{12}." in prompts[3]  # rewriters saw every solution, in order
    assert "#### Solution 2\nSo \\boxed{12}." in prompts[6]


def test_a_wrong_or_missing_choice_scales_by_the_incorrect_weight(kit, plan):
    res = _run(
        kit,
        plan,
        ["\\boxed{12}"] * 3,
        ["\\boxed{11}", "\\boxed{12}", "\\boxed{12}"],
        "I cannot decide.",
    )
    assert res.reward == pytest.approx(0.8)
    assert res.samples[-1].metadata["own_reward"] == 0.0  # no valid Judgment line
    assert res.samples[0].reward == pytest.approx(0.8)
