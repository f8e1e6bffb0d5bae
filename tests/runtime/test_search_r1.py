"""graphs/search_r1.yaml with canned policy replies and the real embedded BM25 retrieval service over
data/corpus.jsonl: every branch (search, answer, invalid action, length cut, turn limit), and the
recipe's token layout (observations inside the one response, masked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted
from graphrl.models.tokenizer import QWEN_TOKEN_IDS

pytest.importorskip("bm25s", reason="the retrieval extra (pip install 'graphrl[retrieval]')")
from graphrl.tools.retrieval_server import retrieval_service

REPO = Path(__file__).resolve().parents[2]
IM_START, IM_END = QWEN_TOKEN_IDS["<|im_start|>"], QWEN_TOKEN_IDS["<|im_end|>"]
INVALID = "\nMy previous action is invalid."


@pytest.fixture(scope="module")
def plan():
    p, diags = plan_from_path(REPO / "graphs" / "search_r1.yaml")
    assert p is not None, diags
    return p


@pytest.fixture(scope="module")
def retrieval_url():
    with retrieval_service(REPO / "data" / "corpus.jsonl") as url:
        yield url


def _stopped(kit, text: str, on: str) -> Scripted:
    ids = kit.ids(text, stop=False)
    return Scripted(output_ids=ids, logprobs=(-0.5,) * len(ids), finish_reason=FinishReason("stop", matched=on))


def _run(kit, plan, url, replies, label="Haldis"):
    engine = kit.engine(replies)
    row = {"prompt": "What is the capital of the Vellmar Islands?", "label": label, "metadata": {"retrieval_url": url}}
    return kit.run(kit.executor(plan, {"policy": engine}), row), engine


def test_search_then_answer(kit, plan, retrieval_url):
    res, engine = _run(
        kit,
        plan,
        retrieval_url,
        [
            _stopped(
                kit,
                "<think>I should look it up.</think>\n<search> capital of the Vellmar Islands </search>",
                "</search>",
            ),
            _stopped(kit, "<think>Haldis.</think>\n<answer> Haldis </answer>", "</answer>"),
        ],
    )
    assert res.status == "completed", res.error
    assert res.reward == {"score": 1.0, "em": 1.0, "format": 1.0}
    assert res.samples[0].reward == 1.0  # trained on the composite's score
    assert [n for n, _ in res.path] == ["think", "search", "think"]
    (s,) = res.samples
    assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [
        ("think", "generated", 1),
        ("search", "observation", 0),
        ("think", "generated", 1),
    ]
    assert IM_START not in s.response_ids and IM_END not in s.response_ids
    obs = kit.r.decode(s.response_ids[s.spans[1].start : s.spans[1].end])
    assert obs.startswith("\n\n<information>Doc 1:") and obs.endswith("</information>\n\n")
    assert "Haldis" in obs  # BM25 over data/corpus.jsonl found the document
    assert engine.requests[1].input_ids == s.tokens[: len(engine.requests[1].input_ids)]


def test_invalid_action_gets_the_correction_inside_the_response(kit, plan, retrieval_url):
    res, _ = _run(
        kit,
        plan,
        retrieval_url,
        [
            "I think it is Haldis.",  # no tag, ends its turn with <|im_end|>
            _stopped(kit, "<answer>Haldis</answer>", "</answer>"),
        ],
    )
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["think", "invalid", "think"] and res.reward["score"] == 1.0
    text = kit.r.decode(res.samples[0].response_ids)
    assert INVALID in text and text.index("<|im_end|>") < text.index(INVALID)


def test_a_length_cut_ends_the_rollout_truncated(kit, plan, retrieval_url):
    cut = kit.ids("<think>" + "very long " * 5, stop=False)
    res, engine = _run(
        kit,
        plan,
        retrieval_url,
        [Scripted(output_ids=cut, logprobs=(-0.5,) * len(cut), finish_reason=FinishReason("length", matched=len(cut)))],
    )
    assert res.status == "truncated" and len(engine.requests) == 1 and res.reward["score"] == 0.0


def test_at_most_max_turns_policy_calls(kit, plan, retrieval_url):
    search = _stopped(kit, "<search>Vellmar</search>", "</search>")
    res, engine = _run(kit, plan, retrieval_url, [search] * 10)
    assert len(engine.requests) == plan.constants["max_turns"] == 4
    assert [n for n, _ in res.path].count("search") == 4
    assert res.status == "completed" and res.reward["score"] == 0.0  # no answer, no format
    (s,) = res.samples
    assert sum(1 for sp in s.spans if sp.kind == "generated") == 4


def test_a_wrong_but_well_formed_answer_gets_the_format_score(kit, plan, retrieval_url):
    res, _ = _run(kit, plan, retrieval_url, [_stopped(kit, "<answer>Orrick</answer>", "</answer>")])
    assert res.status == "completed" and res.reward == {"score": 0.2, "em": 0.0, "format": 1.0}
