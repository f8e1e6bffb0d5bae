"""MemAgent, hand-written and token-exact: slime `generate(args, sample, sampling_params)`.

Tokenise the document once, cut it into 5,000-token chunks (at most 512); per chunk render the
memorize prompt with the chat template and tokenise it (new text), keep the engine's output ids and
log-probs verbatim as that call's training sample; then one answer call. Returns chunks + 1 samples
(one rollout: they share `index`), the exact-match reward split evenly over them. No document ->
one failed, removed sample.
"""

from __future__ import annotations

from typing import Any

from . import common
from .prompts import MEMAGENT_ANSWER, MEMORIZE

CHUNK_TOKENS = 5000
MAX_CHUNKS = 512


async def call(args: Any, sample: Any, sampling_params: dict, user: str, max_new: int) -> tuple[Any, str]:
    tok = common.tokenizer(args)
    text = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
    prompt_ids = tok.encode(text, add_special_tokens=False)
    out = await common.generate(common.policy_url(args), prompt_ids, sampling_params, max_new, sample.session_id)
    ids, logprobs = common.tokens_and_logprobs(out)
    s = common.fill(sample.sibling(), prompt_ids, ids, [1] * len(ids), logprobs, out["text"])
    s.status = common.status(s, common.finish(out))
    return s, common.content(out)


def score(answer: str, label: Any) -> float:
    pred = common.last_boxed(answer[-300:])
    if pred is None:
        return 0.0
    return max(float(common.normalize(pred) == common.normalize(g)) for g in common.golds(label))


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


def _finish(samples: list[Any], reward: float) -> list[Any]:
    for s in samples:
        s.reward = reward / len(samples)
        s.rollout_id = s.index
    return samples
