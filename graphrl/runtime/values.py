"""Plain-value helpers of the executor: message shape, short excerpts for errors, lone surrogates
(text that cannot be UTF-8 encoded for an engine), deep copies of state defaults.

Input -> output: values -> values; pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:  # optional: a C pass that clears most values at once (see lone_surrogate)
    import orjson as _orjson

    _orjson_dumps: Any = _orjson.dumps
    _NON_STR_KEYS = _orjson.OPT_NON_STR_KEYS
except ImportError:  # pragma: no cover - depends on the environment
    _orjson_dumps, _NON_STR_KEYS = None, 0


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
    """The first lone surrogate in the strings of `value` (nested lists/dicts/keys), else None.

    orjson, when installed, first encodes the whole value in C: it refuses any string that is not
    valid UTF-8, so a value it encodes has no lone surrogate in any string the walk below would look
    at (dict keys and values, list and tuple items, Mapping and tuple subclasses through `_as_json`).
    Anything it refuses -- a surrogate, an unsupported key, a huge int, deep nesting -- goes to the walk,
    which finds the first surrogate or says there is none."""
    if _orjson_dumps is not None and type(value) is not str:
        try:
            _orjson_dumps(value, default=_as_json, option=_NON_STR_KEYS)
            return None
        except TypeError:
            pass
    return _walk(value)


def _as_json(value: Any) -> Any:
    """orjson's `default`: the containers the walk looks into, as dict / list; nothing else is text."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _walk(value: Any) -> str | None:
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
            bad = _walk(k) or _walk(v)
            if bad:
                return bad
    elif isinstance(value, (list, tuple)):
        for v in value:
            bad = _walk(v)
            if bad:
                return bad
    return None


def copy_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value
