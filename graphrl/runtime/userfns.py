"""User `module:function` references of a plan -> callables, resolved once per process.

Input: a plan (its source file's directory is searched first) and a reference string.
Output: the callable; an import problem raises `RenderError` located at the plan's source file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..plan import Plan
from ..spec.imports import ImportProblem, resolve_callable
from .scope import RenderError


@functools.lru_cache(maxsize=256)
def _resolve(ref: str, search: tuple[str, ...]) -> Callable[..., Any] | ImportProblem:
    return resolve_callable(ref, [Path(p) for p in search])


def user_callable(plan: Plan, ref: str) -> Callable[..., Any]:
    base = str(Path(plan.source.get("file", ".")).parent)
    fn = _resolve(ref, (base, "."))
    if isinstance(fn, ImportProblem):
        raise RenderError(plan.source.get("file"), fn.message)
    return fn
