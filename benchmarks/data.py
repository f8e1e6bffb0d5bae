"""Seeded benchmark datasets: parameters -> rows in slime's shape {prompt, label, metadata}.

memagent:       a question; label [gold]; metadata.context = a document of `chunks` x `chunk_tokens`
                tokens (minus half a chunk, so it splits into exactly that many chunks) holding one
                sentence that answers the question. Every `empty_every`-th prompt has no document
                (the graph aborts those rollouts cleanly).
toolorchestra:  a question; label gold; metadata {tools (4 JSON schemas), model_mapping (alias ->
                declared expert model), pref_vec, category}.

Invariants: a pure function of the arguments (and the tokenizer, which sizes the documents);
`write_jsonl`/`read_jsonl` round-trip rows exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .sim.text import ALIASES, EXPERT_MODELS, fact, gold_answer, question, seeded, sentence

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
