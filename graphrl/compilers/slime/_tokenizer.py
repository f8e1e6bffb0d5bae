"""Tokenizers for the slime target: a path or name -> a Hugging Face tokenizer, once per process.

Input: `args.hf_checkpoint` (the policy) or a frozen model's `tokenizer:` from the graph: a Hugging
Face directory or hub id, or one of graphrl's names (`qwen`, `qwen2`, `qwen2.5`, `qwen3`, `tiny`).
Output: the tokenizer (memoised per name: slime's rollout manager is one long-lived process).

transformers is imported lazily so that importing the compiled module stays cheap.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=8)
def load_tokenizer(path: str) -> Any:
    from ...models.registry import TOKENIZER_ALIASES, resolve_tokenizer

    if path in TOKENIZER_ALIASES or path == "tiny":
        return resolve_tokenizer(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
