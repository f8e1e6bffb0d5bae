"""Models and tokenizers for the embedded engine: the real Qwen tokenizer, a tiny Qwen2, SmolLM2.

Input: a model name (`tiny`, `smollm2`) or a Hugging Face model directory.
Output: `(model, tokenizer)` pairs, tokenizers, exported HF checkpoint directories.

Invariants: importing `graphrl.models` never imports torch or transformers (they are optional,
imported lazily by the functions that need them); a missing one raises `MissingDependency`.
"""

from graphrl.models.cache import cache_dir
from graphrl.models.errors import MissingDependency, UnknownModel

__all__ = ["MissingDependency", "UnknownModel", "cache_dir"]
