"""Errors of graphrl.models: an unknown model name, and `require` for optional imports.

Input: the name of the missing module (or the unknown model name).
Output: an exception carrying the exact `pip install` command that fixes it.

Invariants: importing this module imports nothing heavy (no torch, no transformers); the CLI maps
`MissingDependency` to exit status 4.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from graphrl.errors import MissingDependency, UsageProblem

__all__ = ["MissingDependency", "UnknownModel", "require"]


class UnknownModel(UsageProblem):
    """A model name that is neither a built-in name nor a Hugging Face model directory."""


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise `MissingDependency` naming what needed it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the package is there but one of *its* imports failed: show the real error
        raise MissingDependency(module.split(".")[0], purpose) from exc
