"""docs/tutorial.md: every graph in it passes `graphrl check`, and they do what the text says
(run with scripted replies, the real Qwen tokenizer, the real sandbox and rewards)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from graphrl.compilers.checks import check_file
from graphrl.compilers.lower import plan_from_path
from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted, ScriptedEngineForTests
from graphrl.models.tokenizer import QWEN_TOKEN_IDS, qwen_tokenizer
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.runtime.services import StaticEndpoints
from graphrl.spec.diagnostics import has_errors
from graphrl.tools.registry import ToolBox

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "tutorial.md"
BLOCK = re.compile(r"<!-- tutorial: (\S+) -->\n```\w+\n(.*?)\n```\n", re.S)
IM_END = QWEN_TOKEN_IDS["<|im_end|>"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tutorial")
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert {name for name, _ in blocks} == {"critique.yaml", "pycheck.yaml", "myrewards.py", "pycheck_custom.yaml"}
    for name, body in blocks:
        (d / name).write_text(body + "\n", encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def renderer() -> ChatRenderer:
    return ChatRenderer(qwen_tokenizer())


def engine(renderer, texts):
    """Replies in call order, each the text's ids then <|im_end|>, as an engine would sample them."""
    replies = []
    for t in texts:
        ids = tuple(renderer.encode(t)) + (IM_END,)
        replies.append(
            Scripted(output_ids=ids, logprobs=(-0.5,) * len(ids), finish_reason=FinishReason("stop", matched=IM_END))
        )
    return ScriptedEngineForTests(replies, tokenizer=renderer.tokenizer)


def rollout(files, renderer, graph, engines, row):
    plan, diags = plan_from_path(files / graph)
    assert plan is not None, diags
    ex = Executor(
        plan,
        StaticEndpoints(engines, renderer),
        tools=ToolBox([files]),
        rewards=RewardBox([files]),
        sampling={"temperature": 1.0},
    )
    return asyncio.run(ex.run(RolloutInput(row=row, rollout_id=7)))


@pytest.mark.parametrize("graph", ["critique.yaml", "pycheck.yaml", "pycheck_custom.yaml"])
def test_tutorial_graphs_pass_the_checks(files, graph):
    g, diags = check_file(files / graph)
    assert g is not None and not has_errors(diags), [str(d) for d in diags]
    assert not diags, [str(d) for d in diags]  # not even a warning


def test_the_misspelt_edge_is_reported_as_the_text_shows(files):
    bad = files / "critique_bad.yaml"
    bad.write_text((files / "critique.yaml").read_text().replace("goto: revise\n", "goto: revice\n"))
    _, diags = check_file(bad)
    first = diags[0]
    assert first.code == "E101" and "did you mean 'revise'" in (first.hint or "")
    assert f"critique.yaml:{first.span.line}:{first.span.col}: error[E101]" in DOC.read_text()


def test_critique_trains_draft_and_revision_with_even_credit(files, renderer):
    policy = engine(renderer, [r"Draft: 7 + 5 = \boxed{13}", r"Fixed: \boxed{12}"])
    critic = engine(renderer, ["The sum is wrong."])
    res = rollout(
        files,
        renderer,
        "critique.yaml",
        {"policy": policy, "critic": critic},
        {"prompt": "What is 7 + 5?", "label": "12"},
    )
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["draft", "critic", "revise"]
    assert res.reward["score"] == 1.0
    assert len(res.samples) == 2 and [s.reward for s in res.samples] == [0.5, 0.5]  # key: score, even
    assert {sp.node for s in res.samples for sp in s.spans} == {"draft", "revise"}  # the critic: in no sample


def test_pycheck_is_one_sample_with_the_tool_output_masked(files, renderer):
    turns = ["Let me check.\n```python\nprint(7 + 5)\n```", r"The program printed 12, so \boxed{12}."]
    res = rollout(
        files,
        renderer,
        "pycheck.yaml",
        {"policy": engine(renderer, turns)},
        {"prompt": "What is 7 + 5?", "label": "12"},
    )
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["compute", "run", "conclude"]
    (sample,) = res.samples
    spans = [sp for sp in sample.spans if sp.kind != "template"]  # the chat template's glue: mask 0 too
    assert [(sp.node, sp.mask) for sp in spans] == [("compute", 1), ("run", 0), ("conclude", 1)]
    assert all(sp.mask == 0 for sp in sample.spans if sp.kind == "template")
    masked = spans[1]
    observation = renderer.decode(sample.response_ids[masked.start : masked.end])
    assert "Output of your program:\n12" in observation  # the sandbox really ran it
    assert res.reward["score"] == 1.0


def test_pycheck_constrains_its_first_turn_to_one_program(files):
    plan, _ = plan_from_path(files / "pycheck.yaml")
    assert plan is not None
    regex = plan.nodes["compute"].constrain.regex
    assert re.fullmatch(regex, "Seven plus five.\n```python\nprint(7 + 5)\n```")
    assert not re.fullmatch(regex, "The answer is \\boxed{12}.")  # no program: not a reply it can give
    assert plan.nodes["conclude"].constrain is None  # the answer is the model's own


def test_the_tutorial_pycheck_is_the_bundled_graph(files):
    bundled = (REPO / "graphs" / "pycheck.yaml").read_text(encoding="utf-8")
    assert bundled[bundled.index("name: pycheck") :] == (files / "pycheck.yaml").read_text(encoding="utf-8")


def test_custom_reward_returns_a_dict_keyed_by_score(files, renderer):
    def reward(reply, label):
        row = {"prompt": "?", "label": label}
        return rollout(files, renderer, "pycheck_custom.yaml", {"policy": engine(renderer, [reply])}, row).reward

    assert reward("About 13 apples", "12") == {"score": 0.0, "parsed": 1.0}  # 1 off: beyond 5 % of 12
    assert reward("About 12.5", "12") == {"score": 1.0, "parsed": 1.0}  # 0.5 off: within 0.6
    assert reward("no idea", "12") == {"score": 0.0, "parsed": 0.0}
