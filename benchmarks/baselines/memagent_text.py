"""MemAgent, hand-written the text-based way: the same calls, but each sample's response tokens are
the re-tokenised response text (slime's search example without log-probs: `tokenizer(response)`),
with the engine's log-probs cut or padded to fit. Where the model sampled a non-canonical
tokenisation, the trained tokens are not the sampled ones.
"""

from __future__ import annotations

from typing import Any

from . import common
from .memagent_careful import CHUNK_TOKENS, MAX_CHUNKS, _finish, score
from .prompts import MEMAGENT_ANSWER, MEMORIZE


async def call(args: Any, sample: Any, sampling_params: dict, user: str, max_new: int) -> tuple[Any, str]:
    tok = common.tokenizer(args)
    text = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
    prompt_ids = tok.encode(text, add_special_tokens=False)
    out = await common.generate(common.policy_url(args), prompt_ids, sampling_params, max_new, sample.session_id)
    _, logprobs = common.tokens_and_logprobs(out)
    ids = tok.encode(out["text"], add_special_tokens=False)  # re-tokenised response
    logprobs = (logprobs + [0.0] * len(ids))[: len(ids)]
    s = common.fill(sample.sibling(), prompt_ids, ids, [1] * len(ids), logprobs, out["text"])
    s.status = common.status(s, common.finish(out))
    return s, common.content(out)


async def generate(args: Any, sample: Any, sampling_params: dict) -> list[Any]:
    tok = common.tokenizer(args)
    context = (sample.metadata or {}).get("context") or ""
    if not context:
        return [common.aborted(sample)]
    doc = tok.encode(context, add_special_tokens=False)
    step = getattr(args, "memagent_chunk_tokens", CHUNK_TOKENS)
    chunks = [doc[i : i + step] for i in range(0, len(doc), step)][:MAX_CHUNKS]
    memory, samples = "No previous memory", []
    for chunk in chunks:
        user = MEMORIZE.format(question=sample.prompt, memory=memory, chunk=tok.decode(chunk))
        s, text = await call(args, sample, sampling_params, user, 1024)
        samples.append(s)
        if s.status == type(s).Status.ABORTED:
            return _finish(samples, 0.0)
        memory = text if text.strip() else memory
    s, text = await call(
        args, sample, sampling_params, MEMAGENT_ANSWER.format(question=sample.prompt, memory=memory), 256
    )
    samples.append(s)
    return _finish(samples, score(text, sample.label))
