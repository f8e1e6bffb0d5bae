"""ToolOrchestra's orchestrator loop, hand-written and token-exact.

One conversation (system + problem, the row's tools through the chat template), at most 12 turns.
The token ids are kept, never re-tokenised: prompt ids, then per turn the engine's output ids (mask
1, its log-probs) and, before the next turn, the ChatML text that closes the turn and carries the
tool result, tokenised on its own (mask 0). One training sample per rollout; reward = sub-EM of
the answer expert's prediction, else the judge's verdict.
"""

from __future__ import annotations

from typing import Any

from . import common
from .orchestra_tools import correctness, final_answer, parse_call, run_tool
from .prompts import ORCHESTRATOR

MAX_TURNS = 12
TOOLS = ("search", "enhance_reasoning", "call_expert", "answer")


def opening(sample: Any) -> list[dict]:
    mapping = sample.metadata["model_mapping"]
    return [
        {"role": "system", "content": ORCHESTRATOR.format(aliases=", ".join(mapping))},
        {"role": "user", "content": sample.prompt},
    ]


def observation_text(result: str, closed: bool) -> str:
    """The ChatML between an assistant turn and the next generation: close the turn (unless the
    engine's stop token already did), the tool result as a user turn, the generation prompt."""
    return (
        ("\n" if closed else "<|im_end|>\n")
        + "<|im_start|>user\n<tool_response>\n"
        + result
        + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


async def generate(args: Any, sample: Any, sampling_params: dict) -> Any:
    tok = common.tokenizer(args)
    mapping = sample.metadata["model_mapping"]
    messages = opening(sample)
    prompt_text = tok.apply_chat_template(
        messages, tools=sample.metadata["tools"], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = tok.encode(prompt_text, add_special_tokens=False)
    ids, response, mask, logprobs = list(prompt_ids), [], [], []
    pending: str | None = None
    closed = True
    prediction, last = "", "stop"
    for _ in range(MAX_TURNS):
        if pending is not None:
            delta = tok.encode(observation_text(pending, closed), add_special_tokens=False)
            ids += delta
            response += delta
            mask += [0] * len(delta)
            logprobs += [0.0] * len(delta)
        out = await common.generate(common.policy_url(args), ids, sampling_params, 1024, sample.session_id)
        out_ids, out_lps = common.tokens_and_logprobs(out)
        ids += out_ids
        response += out_ids
        mask += [1] * len(out_ids)
        logprobs += out_lps
        last = common.finish(out)
        closed = bool(out_ids) and out_ids[-1] == 151645
        text = common.content(out)
        messages.append({"role": "assistant", "content": text})
        if last == "abort":
            break
        call = parse_call(text)
        if call is None or call[1] not in mapping or call[0] not in TOOLS:
            break
        name, alias = call
        if name == "answer":
            prediction = await final_answer(args, sample, sampling_params, mapping[alias], messages)
            break
        pending = await run_tool(args, sample, sampling_params, name, mapping[alias], messages)
        messages.append({"role": "tool", "content": pending})
    common.fill(sample, prompt_ids, response, mask, logprobs, tok.decode(response))
    sample.status = common.status(sample, last)
    sample.reward = await correctness(args, sample, sampling_params, prediction) if last != "abort" else 0.0
    sample.rollout_id = sample.index
    return sample
