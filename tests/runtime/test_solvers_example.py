"""graphs/examples/solvers.yaml (sub-graphs per item, two at once, then a fork): every node driven with
canned replies, and the whole graph through `graphrl run --model tiny`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from graphrl.cli import main
from graphrl.compilers.lower import plan_from_path

REPO = Path(__file__).resolve().parents[2]
GRAPH = REPO / "graphs" / "examples" / "solvers.yaml"


@pytest.fixture(scope="module")
def plan():
    p, diags = plan_from_path(GRAPH)
    assert p is not None, diags
    return p


def test_every_node_runs_and_the_samples_come_in_graph_order(kit, plan):
    engine = kit.by_prompt(
        {
            "Quick guess:": "So \\boxed{12}.",
            "Which of these answers": "None is wrong.",
            "Answer at once": "\\boxed{13}",
            "Check your work": lambda p, i: "Final: \\boxed{12}" if "Solve briefly" in p else "Final: \\boxed{11}",
            "Solve briefly": "7 + 5 = 12",
            "Solve step by step": "7 and 5 make 11",
        }
    )
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "What is 7 + 5?", "label": "12"})
    assert res.status == "completed", res.error
    assert res.state["answers"] == ["Final: \\boxed{12}", "Final: \\boxed{11}"]  # item order
    assert [n for n, _ in res.path] == [
        "solve",
        "solve",
        "solve/draft",
        "solve/refine",
        "solve/draft",
        "solve/refine",
        "fork",
        "critic",
        "guess",
        "pick",
    ]
    nodes = [sorted({sp.node for sp in s.spans if sp.kind == "generated"}) for s in res.samples]
    assert nodes == [["solve/draft", "solve/refine"]] * 2 + [["critic"], ["guess"], ["pick"]]
    assert "Solve briefly" in kit.r.decode(res.samples[0].tokens)  # item 1's thread first
    assert "Solve step by step" in kit.r.decode(res.samples[1].tokens)
    pick_prompt = kit.r.decode(res.samples[4].prompt_ids)
    assert "Quick guess: \\boxed{13}" in pick_prompt and "Critique: None is wrong." in pick_prompt
    assert res.reward["score"] == 1.0 and {s.rollout_id for s in res.samples} == {0}
    assert sum(s.reward for s in res.samples) == pytest.approx(1.0)  # credit even: split, not repeated


def test_graphrl_run_on_tiny_writes_every_nodes_samples_under_one_rollout_id(tmp_path):
    out = tmp_path / "solvers.jsonl"
    r = CliRunner().invoke(
        main,
        ["run", str(GRAPH), "--data", str(REPO / "data" / "math.jsonl"), "--out", str(out)]
        + ["--model", "tiny", "--limit", "2", "--max-new-tokens-cap", "8"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 10  # two rollouts of five samples
    for rid in (0, 1):
        mine = [x for x in lines if x["rollout_id"] == rid]
        firsts = [x["spans"][0]["node"] for x in sorted(mine, key=lambda x: x["sample_index"])]
        assert firsts == ["solve/draft", "solve/draft", "critic", "guess", "pick"]
        assert [x["spans"][0]["visit"] for x in mine if x["spans"][0]["node"] == "solve/draft"] == [1, 2]
    for call in (c for x in lines for c in x["calls"]):
        assert call["completion_tokens"] <= 8, call  # --max-new-tokens-cap reaches the sub-graph's calls
