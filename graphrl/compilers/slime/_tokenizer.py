"""The policy tokenizer for the slime target: `args.hf_checkpoint` -> a Hugging Face tokenizer.

Loaded once per process and path (slime's rollout manager is one long-lived process); transformers
is imported lazily so that importing the compiled module stays cheap.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)
