"""ToolOrchestra's orchestrator loop, hand-written the text-based way (like slime's search-r1 example).

The rollout is kept as text: prompt text + response text. Every turn the whole conversation is
re-tokenised and sent; the engine's answer text is appended; training tokens are built by
tokenising each piece of text (the response text: mask 1, with the engine's log-probs cut or
padded to fit; observation text: mask 0). Same tools, same reward as the careful version.
"""

from __future__ import annotations

from typing import Any

from . import common
from .orchestra_tools import correctness, final_answer, parse_call, run_tool
from .toolorchestra_careful import MAX_TURNS, TOOLS, observation_text, opening


async def generate(args: Any, sample: Any, sampling_params: dict) -> Any:
    tok = common.tokenizer(args)
    mapping = sample.metadata["model_mapping"]
    messages = opening(sample)
    prompt_text = tok.apply_chat_template(
        messages, tools=sample.metadata["tools"], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = tok.encode(prompt_text, add_special_tokens=False)
    response_text, response, mask, logprobs = "", [], [], []
    prediction, last = "", "stop"
    for _ in range(MAX_TURNS):
        ids = tok.encode(prompt_text + response_text, add_special_tokens=False)  # the whole conversation
        out = await common.generate(common.policy_url(args), ids, sampling_params, 1024, sample.session_id)
        _, out_lps = common.tokens_and_logprobs(out)
        turn = tok.encode(out["text"], add_special_tokens=False)
        response_text += out["text"]
        response += turn
        mask += [1] * len(turn)
        logprobs += (out_lps + [0.0] * len(turn))[: len(turn)]
        last = common.finish(out)
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
        result = await run_tool(args, sample, sampling_params, name, mapping[alias], messages)
        messages.append({"role": "tool", "content": result})
        obs = observation_text(result, out["text"].endswith(common.IM_END))
        response_text += obs
        obs_ids = tok.encode(obs, add_special_tokens=False)
        response += obs_ids
        mask += [0] * len(obs_ids)
        logprobs += [0.0] * len(obs_ids)
    common.fill(sample, prompt_ids, response, mask, logprobs, response_text)
    sample.status = common.status(sample, last)
    sample.reward = await correctness(args, sample, sampling_params, prediction) if last != "abort" else 0.0
    sample.rollout_id = sample.index
    return sample
