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


def _local_origin(top: str, search: list[Path]) -> Path | None:
    """The file a top-level module name means next to the graph (first search dir that has it), or None."""
    for d in search:
        for candidate in (d / f"{top}.py", d / top / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def _import(module_name: str, search: list[Path]) -> Any:
    """Import with the search dirs first on sys.path. Two graphs may each have a `tools.py` of their
    own: when sys.modules holds a same-named module from another file, it is set aside for this
    import and put back afterwards, so each graph gets its own file (the new module lives on in the
    callables resolved from it, not in sys.modules)."""
    top = module_name.split(".")[0]
    local = _local_origin(top, search)
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None)
    clash = local is not None and loaded is not None and (origin is None or Path(origin).resolve() != local)
    set_aside = {n: m for n, m in sys.modules.items() if n == top or n.startswith(top + ".")} if clash else {}
    for name in set_aside:
        del sys.modules[name]
    saved = list(sys.path)
    sys.path[:0] = [str(p) for p in search]
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path[:] = saved
        if clash:
            for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
                del sys.modules[name]
            sys.modules.update(set_aside)


def resolve_callable(ref: str, search: Iterable[Path] = ()) -> Callable[..., Any] | ImportProblem:
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        return ImportProblem(f"'{ref}' is not a module:function reference", "write it as package.module:function")
    search = [Path(p) for p in search]
    try:
        module = _import(module_name, search)
    except Exception as exc:  # user code may raise anything at import time
        return ImportProblem(
            f"cannot import module '{module_name}': {type(exc).__name__}: {exc}",
            "check the module is on PYTHONPATH or next to the graph file",
        )
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))]
            listed = ", ".join(sorted(names)[:12]) + (", ..." if len(names) > 12 else "")
            hint = did_you_mean(part, names) or (f"callables in it: {listed}" if names else "it defines no callable")
            return ImportProblem(f"module '{module_name}' has no attribute '{attr}'", hint)
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
