"""ToolOrchestra's tools, hand-written (shared by the careful and the text-based orchestrator loop).

Input: slime args, the sample (session id), sampling params, the tool name, the expert model the
alias maps to, the conversation so far (chat messages), the retrieval URL. Output: the observation
text appended to the conversation as a `tool` message; `final_answer` returns the prediction.

search: the expert writes <query>; POST /retrieve; "Doc i: ..." lines. enhance_reasoning: the
expert reasons; a ```python block runs in a subprocess (30 s timeout) and its output is appended.
call_expert: the conversation (without the orchestrator's system prompt) goes to the expert.
Expert calls are fresh prompts: rendered with the chat template, tokenised, never trained.
`correctness`: sub-EM, else (a non-empty prediction judged wrong) the judge model's JSON verdict.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

from . import common
from .prompts import CONSULT, EXPERT, JUDGE, reason, search_query
from .prompts import final_answer as final_prompt

_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)


async def expert(args: Any, sample: Any, sampling_params: dict, model: str, messages: list[dict]) -> str:
    tok = common.tokenizer(args)
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    out = await common.generate(common.model_url(args, model), ids, sampling_params, 1024, sample.session_id)
    return common.content(out)


def _results(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "tool"]


async def run_python(code: str, timeout: float = 30.0) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return f"[timed out after {timeout:g} s]"
    return out.decode("utf-8", "replace")[:4000]


async def retrieve(url: str, query: str, topk: int = 3) -> str:
    body = await common.post(url, {"queries": [query], "topk": topk})
    docs = body["result"][0]
    return "\n".join(f"Doc {i}: {d['contents'].strip()}" for i, d in enumerate(docs, 1)) or "No documents found."


async def run_tool(args: Any, sample: Any, sampling_params: dict, name: str, model: str, messages: list[dict]) -> str:
    problem = sample.prompt
    if name == "search":
        text = await expert(
            args,
            sample,
            sampling_params,
            model,
            [{"role": "user", "content": search_query(problem, _results(messages))}],
        )
        query = common.last_tag(common.after_think(text), "query")
        return await retrieve(args.retrieval_url, query if query is not None else problem)
    if name == "enhance_reasoning":
        text = await expert(
            args, sample, sampling_params, model, [{"role": "user", "content": reason(problem, _results(messages))}]
        )
        answer = common.after_think(text).strip()
        code = _FENCE.search(common.after_think(text))
        if code is None:
            return answer
        return f"{answer}\n\nOutput of the code:\n{await run_python(code.group(1))}"
    if name == "call_expert":
        text = await expert(
            args,
            sample,
            sampling_params,
            model,
            [{"role": "system", "content": EXPERT}, *messages[1:], {"role": "user", "content": CONSULT}],
        )
        return common.after_think(text).strip()
    raise ValueError(name)


async def final_answer(args: Any, sample: Any, sampling_params: dict, model: str, messages: list[dict]) -> str:
    text = await expert(
        args,
        sample,
        sampling_params,
        model,
        [{"role": "user", "content": final_prompt(sample.prompt, _results(messages))}],
    )
    text = common.after_think(text)
    pred = common.last_tag(text, "answer")
    if pred is None:
        boxed = common.last_boxed(text)
        pred = boxed.strip() if boxed is not None else ""
    return pred


def sub_em(prediction: str, label: Any) -> float:
    pred = common.normalize(prediction)
    return max(float(bool(g) and g in pred) for g in map(common.normalize, common.golds(label)))


JUDGE_MODEL = "Qwen/Qwen3-32B"


async def correctness(args: Any, sample: Any, sampling_params: dict, prediction: str) -> float:
    """sub-EM; when it says wrong and there is a prediction, the judge model's {"correct": ...}."""
    score = sub_em(prediction, sample.label)
    if score or not prediction.strip():
        return score
    tok = common.tokenizer(args)
    prompt = JUDGE.format(
        question=sample.prompt, prediction=prediction.strip(), label=" | ".join(common.golds(sample.label))
    )
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    out = await common.generate(
        common.model_url(args, JUDGE_MODEL), ids, {**sampling_params, "temperature": 0.0}, 512, sample.session_id
    )
    found = re.findall(r'"?correct"?\s*:\s*"?(true|false)', out["text"], re.I)
    return float(bool(found) and found[-1].lower() == "true")


def parse_call(text: str) -> tuple[str, str] | None:
    """(tool name, expert alias) of the first <tool_call>, or None if the turn has no valid call."""
    import json

    bodies = re.findall(r"<tool_call>(.*?)</tool_call>", common.after_think(text), re.S)
    try:
        calls = [json.loads(b.strip()) for b in bodies]
    except ValueError:
        return None
    if not calls or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        return None
    arguments = calls[0].get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    return calls[0]["name"], str(arguments.get("model", ""))
