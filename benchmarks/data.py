"""Seeded benchmark datasets: parameters -> rows in slime's shape {prompt, label, metadata}.

memagent:       a question; label [gold]; metadata.context = a document of `chunks` x `chunk_tokens`
                tokens (minus half a chunk, so it splits into exactly that many chunks) holding one
                sentence that answers the question. Every `empty_every`-th prompt has no document
                (the graph aborts those rollouts cleanly).
toolorchestra:  a question; label gold; metadata {tools (4 JSON schemas), model_mapping (alias ->
                declared expert model), pref_vec, category}.
search_r1 / retool: a one-line question marked "(case N)" and its answer, a BM25 corpus for
                Search-R1, and the same rows in the shapes slime's own examples read.

Invariants: a pure function of the arguments (and the tokenizer, which sizes the documents);
`write_jsonl`/`read_jsonl` round-trip rows exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .sim.agents import retool_gold
from .sim.text import ALIASES, EXPERT_MODELS, NAMES, fact, gold_answer, question, seeded, sentence

_TOOL_TEXT = {
    "search": "An expert model writes a search query for the missing information; a retrieval service "
    "returns the most relevant documents.",
    "enhance_reasoning": "An expert model reasons about the problem step by step and may write and run Python code.",
    "call_expert": "The conversation so far is handed to an expert model, whose solution is returned.",
    "answer": "An expert model writes the final answer from the information gathered. Ends the task.",
}


def tool_schemas() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": text,
                "parameters": {
                    "type": "object",
                    "required": ["model"],
                    "properties": {
                        "model": {
                            "type": "string",
                            "enum": list(ALIASES),
                            "description": "The expert to use, by alias.",
                        }
                    },
                },
            },
        }
        for name, text in _TOOL_TEXT.items()
    ]


def _document(rng, q: str, tokens: int, tokenizer) -> str:
    n = max(2, tokens // 17 + 2)
    sents = [sentence(rng) for _ in range(n)]
    sents.insert(rng.randrange(max(1, int(n * 0.8))), fact(q))
    text = " ".join(sents)
    ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    return tokenizer.backend_tokenizer.decode(ids[:tokens], skip_special_tokens=False)


def memagent_rows(
    n_prompts: int, *, seed: int, chunk_tokens: int, chunks: tuple[int, int], tokenizer, empty_every: int = 0
) -> list[dict[str, Any]]:
    """`chunks` = (lo, hi): each document has a seeded number of chunks in [lo, hi]."""
    rows = []
    for i in range(n_prompts):
        rng = seeded(seed, "memagent", i)
        q = question(rng, i)
        n_chunks = rng.randint(*chunks)
        doc = (
            ""
            if empty_every and i % empty_every == empty_every - 1
            else _document(rng, q, n_chunks * chunk_tokens - max(1, chunk_tokens // 2), tokenizer)
        )
        rows.append({"prompt": q, "label": [gold_answer(q)], "metadata": {"context": doc}})
    return rows


def toolorchestra_rows(n_prompts: int, *, seed: int) -> list[dict[str, Any]]:
    rows = []
    schemas = tool_schemas()
    for i in range(n_prompts):
        rng = seeded(seed, "toolorchestra", i)
        q = question(rng, i)
        problem = f"{sentence(rng)} {q}"
        mapping = {a: EXPERT_MODELS[(i + j) % len(EXPERT_MODELS)] for j, a in enumerate(ALIASES)}
        rows.append(
            {
                "prompt": problem,
                "label": gold_answer(problem),
                "metadata": {
                    "category": "qa",
                    "tools": schemas,
                    "model_mapping": mapping,
                    "pref_vec": {"accuracy": 1.0, "cost": 0.3, "latency": 0.2},
                },
            }
        )
    return rows


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


# -- Search-R1 and ReTool (benchmarks.peers): one row per rollout, "(case N)" marks the rollout -----------
def search_r1_rows(n_prompts: int, *, seed: int) -> list[dict[str, Any]]:
    """graphs/search_r1.yaml's rows: a question, its gold answer; the retrieval URL is set per run."""
    rows = []
    for i in range(n_prompts):
        q = question(seeded(seed, "search_r1", i), i)
        rows.append({"prompt": q, "label": gold_answer(q), "metadata": {}})
    return rows


def retool_rows(n_prompts: int, *, seed: int) -> list[dict[str, Any]]:
    """graphs/retool.yaml's rows: a one-line question and its answer (benchmarks.sim.agents.retool_gold)."""
    rows = []
    for i in range(n_prompts):
        rng = seeded(seed, "retool", i)
        q = f"Compute the ledger checksum of {rng.choice(NAMES)} for the year {rng.randint(1500, 1899)}. (case {i})"
        rows.append({"prompt": q, "label": retool_gold(q), "metadata": {}})
    return rows


def search_corpus(rows: list[dict[str, Any]], *, seed: int, filler: int = 2000) -> list[dict[str, Any]]:
    """A BM25 corpus for the Search-R1 rows: one document stating each row's answer (`fact`), and
    `filler` documents of seeded sentences about the same places."""
    docs = [{"id": f"fact-{i}", "title": r["label"], "contents": fact(r["prompt"])} for i, r in enumerate(rows)]
    for j in range(filler):
        rng = seeded(seed, "corpus", j)
        docs.append(
            {"id": f"doc-{j}", "title": rng.choice(NAMES), "contents": " ".join(sentence(rng) for _ in range(4))}
        )
    return docs


def search_r1_peer_rows(rows: list[dict[str, Any]], template: str) -> list[dict[str, Any]]:
    """The same rows in the shape slime's Search-R1 example reads (its run script: --input-key prompt
    --label-key reward_model --apply-chat-template): the user message is the graph's own question
    template, rendered; the label is Search-R1's {"ground_truth": {"target": [...]}}."""
    import jinja2

    tpl = jinja2.Environment().from_string(template)
    return [
        {
            "prompt": [{"role": "user", "content": tpl.render(question=r["prompt"])}],
            "reward_model": {"ground_truth": {"target": [r["label"]]}},
        }
        for r in rows
    ]


def retool_peer_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same rows as slime's ReTool example reads them (--input-key prompt --label-key label)."""
    return [{"prompt": r["prompt"], "label": r["label"]} for r in rows]
