"""graphrl.data: readers of the training formats -> slime rows; synthetic MemAgent documents; demo data files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphrl.data.readers import FORMATS, RowError, dapo, hotpot_context, hotpotqa, read, toolorchestra
from graphrl.data.synth import memagent_rows

REPO = Path(__file__).resolve().parents[2]

DAPO_ORIGINAL = {
    "data_source": "math_dapo",
    "prompt": [
        {
            "role": "user",
            "content": "Solve the following math problem step by step. The last line of your response should be of "
            "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
            "How many positive divisors does 36 have?\n\n"
            'Remember to put your answer on its own line after "Answer:".',
        }
    ],
    "ability": "MATH",
    "reward_model": {"ground_truth": "9", "style": "rule-lighteval/MATH_v2"},
    "extra_info": {"index": "a1b2"},
}


def test_dapo_original_rows_keep_the_problem_only():
    row = dapo(DAPO_ORIGINAL)
    assert row == {
        "prompt": "How many positive divisors does 36 have?",
        "label": "9",
        "metadata": {"data_source": "math_dapo", "ability": "MATH", "extra_info": {"index": "a1b2"}},
    }
    assert dapo(DAPO_ORIGINAL, keep_instructions=True)["prompt"].startswith("Solve the following")


def test_dapo_flat_rows_pass_through():
    assert dapo({"prompt": "1+1?", "label": 2, "metadata": {"k": 1}}) == {
        "prompt": "1+1?",
        "label": "2",
        "metadata": {"k": 1},
    }
    with pytest.raises(RowError, match="label, answer or reward_model.ground_truth"):
        dapo({"prompt": "1+1?"})


def test_hotpotqa_list_context():
    rec = {
        "_id": "x1",
        "question": "Which city?",
        "answer": "Paris",
        "type": "bridge",
        "supporting_facts": [["France", 0]],
        "context": [["France", ["France is a country.", " Its capital is Paris."]], ["Spain", ["Spain too."]]],
    }
    row = hotpotqa(rec)
    assert row["prompt"] == "Which city?" and row["label"] == ["Paris"]
    assert row["metadata"]["context"] == (
        "Document 1: France\nFrance is a country. Its capital is Paris.\n\nDocument 2: Spain\nSpain too."
    )
    assert row["metadata"]["_id"] == "x1" and row["metadata"]["supporting_facts"] == [["France", 0]]


def test_hotpotqa_column_context_and_memagent_rows():
    cols = {"title": ["A", "B"], "sentences": [["a1 ", "a2"], ["b1"]]}
    assert hotpot_context(cols) == "Document 1: A\na1 a2\n\nDocument 2: B\nb1"
    row = hotpotqa({"input": "q?", "answers": ["x", "y"], "context": "already one text", "length": 7000})
    assert row == {"prompt": "q?", "label": ["x", "y"], "metadata": {"context": "already one text", "length": 7000}}
    with pytest.raises(RowError, match="context"):
        hotpotqa({"question": "q", "answer": "a"})


def test_toolorchestra_flat_and_slime_adapted_rows_agree():
    common = {
        "model_mapping": {"expert-1": "Qwen/Qwen3-32B"},
        "pref_vec": {"accuracy": 1},
        "category": "qa",
        "tool_pricing": {"Qwen/Qwen3-32B": {"input": 0.8, "output": 0.8}},
    }
    tools = [{"type": "function", "function": {"name": "answer"}}]
    flat = {"id": "stem____1", "problem": "Q?", "answer": "A", "tools": tools, **common}
    adapted = {"problem": "Q?", "answer": "A", "tools": tools, "metadata": {"id": "stem____1", **common}}
    a, b = toolorchestra(flat), toolorchestra(adapted)
    assert a == b
    assert a["prompt"] == "Q?" and a["label"] == "A" and a["metadata"]["tools"] == tools
    with pytest.raises(RowError, match="model_mapping"):
        toolorchestra({"problem": "Q?", "answer": "A"})


def test_read_converts_a_file_and_locates_errors(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(DAPO_ORIGINAL) + "\n\n" + json.dumps({"prompt": "2+2?", "label": "4"}) + "\n")
    assert [r["label"] for r in read(path, "dapo")] == ["9", "4"]
    path.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(RowError, match=r"d.jsonl:1: missing field"):
        list(read(path, "dapo"))
    (tmp_path / "l.json").write_text(json.dumps([{"question": "q", "answer": "a", "context": "c"}]))
    assert list(read(tmp_path / "l.json", "hotpotqa"))[0]["metadata"]["context"] == "c"
    assert set(FORMATS) == {"dapo", "hotpotqa", "toolorchestra"}


def test_synthetic_memagent_rows_are_deterministic_long_and_answerable():
    rows = memagent_rows(3, seed=0)
    assert rows == memagent_rows(3, seed=0) and rows != memagent_rows(3, seed=1)
    for row in rows:
        ctx, (town,) = row["metadata"]["context"], row["label"]
        work, builder = row["metadata"]["supporting_facts"]
        assert len(ctx) >= 56_000  # > 10,000 tokens: three 5,000-token chunks
        a = ctx.index("designed by the")
        b = ctx.index(f"{builder} was born in {town}")
        assert a < len(ctx) // 2 + 5000 and b > a and town not in row["prompt"]
        assert ctx.count("was designed by") == 1 and ctx.count(f"{builder} was born") == 1  # no contradiction
        assert row["prompt"].endswith(f"designed the {work} born?")
    assert len({r["prompt"] for r in rows}) == 3


def test_memagent_documents_span_several_chunks_with_the_real_tokenizer():
    from graphrl.models.registry import resolve_tokenizer

    tok = resolve_tokenizer("qwen")
    for row in memagent_rows(3):
        assert len(tok.encode(row["metadata"]["context"])) > 10_000


def test_bundled_data_files_are_small_and_well_formed():
    for name in ("math.jsonl", "toolorchestra.jsonl", "corpus.jsonl"):
        path = REPO / "data" / name
        assert path.stat().st_size < 200_000
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        assert rows
    math_rows = [json.loads(x) for x in (REPO / "data" / "math.jsonl").read_text().splitlines()]
    assert len(math_rows) >= 5 and all(set(r) == {"prompt", "label"} for r in math_rows)
    from graphrl.compilers.lower import plan_from_path

    plan, _ = plan_from_path(REPO / "graphs" / "toolorchestra.yaml")
    for line in (REPO / "data" / "toolorchestra.jsonl").read_text().splitlines():
        row = toolorchestra(json.loads(line))  # already in the graph's shape: the reader is the identity
        assert row == json.loads(line)
        assert set(row["metadata"]["model_mapping"].values()) <= set(plan.models)
        assert {t["function"]["name"] for t in row["metadata"]["tools"]} == {
            "search",
            "enhance_reasoning",
            "call_expert",
            "answer",
        }
        assert set(row["metadata"]["pref_vec"]) >= {"accuracy", "cost", "latency"}
