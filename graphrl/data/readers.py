"""Readers: the seed workflows' training files -> slime rows {prompt, label, metadata}.

Input: one record (a dict) of a known format, or a JSONL file. Output: a slime row, the shape
`graphrl run` and slime's `--input-key prompt --label-key label --metadata-key metadata` read.

Formats (`FORMATS`):
- `dapo`: DAPO-Math-style rows, either the original ({prompt: [{role, content}], reward_model:
  {ground_truth}, ...}; the "Solve ... Answer: $Answer" wrapper around the problem is removed unless
  keep_instructions) or already flat ({prompt, label}). AgentFlow reads prompt as the question.
- `hotpotqa`: HotpotQA-style rows: question/input, answer/answers, and context as a string, as
  HotpotQA's [[title, [sentences]]] list, or as its {title: [...], sentences: [[...]]} columns;
  -> metadata.context = "Document i: title\\ntext" blocks (what graphs/memagent.yaml chunks).
- `toolorchestra`: ToolOrchestra rows, flat ({problem, answer, tools, model_mapping, tool_pricing,
  pref_vec, category, ...}) or slime-adapted ({problem, answer, tools, metadata: {...}});
  -> prompt = problem, label = answer, every other field under metadata (tools included: the graph
  reads metadata.tools).
A record that lacks what its format needs raises `RowError` naming the missing field.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .jsonl import JsonlError, iter_jsonl

_DAPO_HEAD = re.compile(
    r"^\s*Solve the following math problem step by step\..*?where \$Answer is the answer to "
    r"the problem\.\s*",
    re.S,
)
_DAPO_TAIL = re.compile(r"\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


class RowError(ValueError):
    pass


def _need(rec: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if rec.get(k) not in (None, ""):
            return rec[k]
    raise RowError(f"missing field: {' or '.join(keys)}")


def dapo(rec: dict[str, Any], *, keep_instructions: bool = False) -> dict[str, Any]:
    prompt = _need(rec, "prompt", "problem", "question")
    if isinstance(prompt, list):  # chat messages: the user turn holds the problem
        prompt = next((m.get("content", "") for m in reversed(prompt) if m.get("role") == "user"), "")
    prompt = str(prompt)
    if not keep_instructions:
        prompt = _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", prompt)).strip()
    label = rec.get("label", rec.get("answer"))
    if label in (None, ""):
        label = (rec.get("reward_model") or {}).get("ground_truth")
    if label in (None, ""):
        raise RowError("missing field: label, answer or reward_model.ground_truth")
    meta = {
        k: v
        for k, v in rec.items()
        if k not in ("prompt", "problem", "question", "label", "answer", "reward_model", "metadata")
    }
    meta.update(rec.get("metadata") or {})
    return {"prompt": prompt, "label": str(label), "metadata": meta}


def hotpot_context(context: Any) -> str:
    """HotpotQA context (string, [[title, sentences]] or {title, sentences}) -> one document text."""
    if isinstance(context, str):
        return context
    if isinstance(context, dict):
        pairs = list(zip(context.get("title") or [], context.get("sentences") or []))
    else:
        pairs = [(c[0], c[1]) for c in context or []]
    blocks = []
    for i, (title, sentences) in enumerate(pairs, 1):
        body = "".join(sentences) if isinstance(sentences, list) else str(sentences)
        blocks.append(f"Document {i}: {title}\n{body.strip()}")
    return "\n\n".join(blocks)


def hotpotqa(rec: dict[str, Any]) -> dict[str, Any]:
    question = _need(rec, "prompt", "question", "input")
    answers = rec.get("label", rec.get("answers", rec.get("answer")))
    if answers in (None, "", []):
        raise RowError("missing field: answer or answers")
    meta = dict(rec.get("metadata") or {})
    context = meta.get("context", rec.get("context"))
    if context in (None, "", []):
        raise RowError("missing field: context (or metadata.context)")
    meta["context"] = hotpot_context(context)
    for k in ("_id", "id", "type", "level", "supporting_facts", "length"):
        if k in rec:
            meta.setdefault(k, rec[k])
    return {
        "prompt": str(question),
        "label": answers if isinstance(answers, list) else [str(answers)],
        "metadata": meta,
    }


def toolorchestra(rec: dict[str, Any]) -> dict[str, Any]:
    problem = rec.get("problem", rec.get("prompt"))
    if problem is None:
        raise RowError("missing field: problem")
    meta = dict(rec.get("metadata") or {})
    for k, v in rec.items():
        if k not in ("problem", "prompt", "answer", "label", "metadata"):
            meta.setdefault(k, v)
    if not isinstance(meta.get("model_mapping"), dict):
        raise RowError("missing field: model_mapping (expert alias -> model)")
    meta.setdefault("tools", [])
    return {"prompt": str(problem), "label": rec.get("answer", rec.get("label", "")), "metadata": meta}


FORMATS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "dapo": dapo,
    "hotpotqa": hotpotqa,
    "toolorchestra": toolorchestra,
}


def read(path: str | Path, fmt: str) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file (or a JSON list) converted by `fmt`; errors say file:line."""
    convert = FORMATS[fmt]
    text = Path(path).read_text(encoding="utf-8")
    try:
        lines = enumerate(json.loads(text), 1) if text.lstrip().startswith("[") else iter_jsonl(path)
    except json.JSONDecodeError as exc:
        raise RowError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    while True:
        try:
            n, item = next(lines)
        except StopIteration:
            return
        except JsonlError as exc:
            raise RowError(str(exc)) from None
        try:
            yield convert(item)
        except RowError as exc:
            raise RowError(f"{path}:{n}: {exc}") from None


if __name__ == "__main__":  # python -m graphrl.data.readers FORMAT IN OUT.jsonl
    fmt, src, dst = sys.argv[1:4]
    with open(dst, "w", encoding="utf-8") as out:
        for row in read(src, fmt):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
