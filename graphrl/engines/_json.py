"""JSON for the engine wire protocol: Python objects <-> UTF-8 bytes, orjson when installed.

Input: dicts/lists/str/int/float/None (tuples encode as arrays). Output: bytes; `loads` takes bytes
or str. Invariants: both backends produce the same JSON values for finite data. JSON has no
NaN/Infinity: the json backend raises ValueError, orjson writes null, so callers that may hold
non-finite floats (log-probs) check them before encoding.
"""

from __future__ import annotations

import json
from typing import Any

try:  # orjson is optional: a few times faster on the large int arrays of input_ids
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]  # the json fallback below

__all__ = ["dumps", "loads", "BACKEND"]

BACKEND = "orjson" if _orjson is not None else "json"

if _orjson is not None:
    _orjson_dumps = _orjson.dumps

    def dumps(obj: Any) -> bytes:
        """Encode `obj` as compact JSON bytes (NaN/Infinity become null: check before)."""
        return _orjson_dumps(obj)

    loads = _orjson.loads
else:
    _encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False).encode
    _decode = json.loads

    def dumps(obj: Any) -> bytes:
        """Encode `obj` as compact JSON bytes; ValueError on NaN/Infinity."""
        return _encode(obj).encode()

    def loads(data: bytes | str) -> Any:
        """Decode JSON bytes or str."""
        return _decode(data)
