"""Plain-value helpers of the executor: message shape, short excerpts for errors, lone surrogates
(text that cannot be UTF-8 encoded for an engine), deep copies of state defaults.

Input -> output: values -> values; pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_message(x: Any) -> bool:
    return (
        isinstance(x, Mapping)
        and isinstance(x.get("role"), str)
        and (x.get("content") is None or isinstance(x.get("content"), (str, list)))
    )


def excerpt(value: Any, n: int = 80) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:n]}{'...' if len(text) > n else ''}"


def lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in the strings of `value` (nested lists/dicts/keys), else None."""
    t = type(value)
    if t is str or (t is not dict and t is not list and isinstance(value, str)):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return value[exc.start]
        return None
    if t is dict or (t is not list and isinstance(value, Mapping)):
        for k, v in value.items():
            bad = lone_surrogate(k) or lone_surrogate(v)
            if bad:
                return bad
    elif isinstance(value, (list, tuple)):
        for v in value:
            bad = lone_surrogate(v)
            if bad:
                return bad
    return None


def copy_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value
