"""What every hand-written generate function carries around: tokenizer, HTTP, sample filling, scoring.

Input: slime's `args` (router address, `sglang_model_routers`, `hf_checkpoint`) and its Sample.
Output: helpers -- one aiohttp session per event loop with orjson (a lean client, at least as lean as
graphrl's, so the comparison measures the workflow code and not the transport), SGLang payloads,
token/log-prob columns of a response, slime statuses, SQuAD-style answer scoring.

`load_tokenizer` is looked up at call time (`common.load_tokenizer(...)`), so the harness can wrap
the tokenizer to time tokenisation.
"""

from __future__ import annotations

import asyncio
import functools
import re
import string
from typing import Any

import aiohttp
import orjson

IM_END = "<|im_end|>"
ROUTING_HEADER = "X-SMG-Routing-Key"


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def tokenizer(args: Any) -> Any:
    return load_tokenizer(args.hf_checkpoint)


# -- HTTP --------------------------------------------------------------------------------------
_sessions: dict[int, aiohttp.ClientSession] = {}


def _session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    s = _sessions.get(id(loop))
    if s is None or s.closed:
        s = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=2048, keepalive_timeout=4.0), timeout=aiohttp.ClientTimeout(total=900)
        )
        _sessions[id(loop)] = s
    return s


async def post(url: str, payload: dict, session_id: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if session_id:
        headers[ROUTING_HEADER] = session_id
    async with _session().post(url, data=orjson.dumps(payload), headers=headers) as resp:
        body = await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {body[:300]!r}")
        return orjson.loads(body)


async def close() -> None:
    for s in list(_sessions.values()):
        await s.close()
    _sessions.clear()


def policy_url(args: Any) -> str:
    return f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate"


def model_url(args: Any, model: str) -> str:
    ip, port = args.sglang_model_routers[model]
    return f"http://{ip}:{port}/generate"


async def generate(
    url: str, ids: list[int], sampling_params: dict, max_new_tokens: int, session_id: str | None
) -> dict:
    params = {**sampling_params, "max_new_tokens": max_new_tokens}
    return await post(url, {"input_ids": ids, "sampling_params": params, "return_logprob": True}, session_id)


# -- responses and samples ----------------------------------------------------------------------
def tokens_and_logprobs(out: dict) -> tuple[list[int], list[float]]:
    column = out["meta_info"]["output_token_logprobs"]
    return [t[1] for t in column], [t[0] for t in column]


def finish(out: dict) -> str:
    return out["meta_info"]["finish_reason"]["type"]


def content(out: dict) -> str:
    """The assistant text without the closing stop token (as it goes into the chat history)."""
    text = out["text"]
    return text[: -len(IM_END)] if text.endswith(IM_END) else text


def status(sample: Any, finish_type: str) -> Any:
    name = {"stop": "COMPLETED", "length": "TRUNCATED", "abort": "ABORTED"}.get(finish_type, "FAILED")
    return type(sample).Status[name]


def fill(
    sample: Any, prompt_ids: list[int], response: list[int], mask: list[int], logprobs: list[float], text: str
) -> Any:
    sample.tokens = list(prompt_ids) + list(response)
    sample.response_length = len(response)
    sample.loss_mask = mask
    sample.rollout_log_probs = logprobs
    sample.response = text
    return sample


def aborted(sample: Any) -> Any:
    """A rollout that cannot run (no document): a one-token sample that trains nothing. FAILED, as
    graphrl's compiled generate marks a graph's own abort: slime retries ABORTED samples (fully
    async regenerates them forever), and a row without a document never gets better."""
    fill(sample, [151643], [151643], [0], [0.0], "")
    sample.status = type(sample).Status.FAILED
    sample.remove_sample = True
    sample.reward = 0.0
    return sample


# -- parsing and scoring --------------------------------------------------------------------------
def after_think(text: str) -> str:
    return text.split("</think>")[-1]


def last_boxed(text: str) -> str | None:
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    depth, start = 1, i + len("\\boxed{")
    for j in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start:j]
    return None


def last_tag(text: str, tag: str) -> str | None:
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, re.S)
    return found[-1].strip() if found else None


_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    text = re.sub(r"\b(a|an|the)\b", " ", str(text).lower().translate(_PUNCT))
    return " ".join(text.split())


def golds(label: Any) -> list[str]:
    return [str(x) for x in label] if isinstance(label, (list, tuple)) else [str(label)]
