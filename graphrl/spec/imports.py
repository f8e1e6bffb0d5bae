"""`module:function` references -> callables, and signature checks against the arguments a graph passes.

Input: a reference string and the directories to search (the graph's directory first, then sys.path).
Output: the callable, or an `ImportProblem` saying what went wrong (never a traceback).

Invariant: sys.path is restored after each import; importing runs the module's top-level code, so
graph checks run user code exactly as the runtime would (documented in docs/errors.md, E303).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .diagnostics import did_you_mean


@dataclass(frozen=True)
class ImportProblem:
    message: str
    hint: str | None = None


def resolve_callable(ref: str, search: Iterable[Path] = ()) -> Callable[..., Any] | ImportProblem:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        return ImportProblem(f"'{ref}' is not a module:function reference", "write it as package.module:function")
    saved = list(sys.path)
    sys.path[:0] = [str(p) for p in search]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # user code may raise anything at import time
        return ImportProblem(
            f"cannot import module '{module_name}': {type(exc).__name__}: {exc}",
            "check the module is on PYTHONPATH or next to the graph file",
        )
    finally:
        sys.path[:] = saved
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(module) if not n.startswith("_")]

            return ImportProblem(f"module '{module_name}' has no attribute '{attr}'", did_you_mean(part, names))
        obj = getattr(obj, part)
    if not callable(obj):
        return ImportProblem(f"'{ref}' is not callable")
    return obj


def signature_problem(fn: Callable[..., Any], positional: int, keywords: Iterable[str]) -> str | None:
    """None when fn(<positional args>, **keywords) binds; else what is wrong."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins without signatures: cannot check
    try:
        sig.bind(*([None] * positional), **{k: None for k in keywords})
    except TypeError as exc:
        return f"{getattr(fn, '__name__', fn)}{sig}: {exc}"
    return None
