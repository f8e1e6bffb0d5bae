"""JSONL files -> (line number, value) pairs, or one located error.

Input: a path. Output: an iterator of `(lineno, value)` for every non-blank line.
Invariant: any bad line -- not UTF-8, not JSON, nested past Python's recursion limit, a number
Python will not convert -- raises `JsonlError` (a ValueError) located at it as file:line:col;
nothing else is raised for the file's content. Lines end with \\n (\\r\\n works too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


class JsonlError(ValueError):
    pass


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, Any]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                col = len(raw[: exc.start].decode("utf-8", "replace")) + 1
                raise JsonlError(f"{path}:{lineno}:{col}: not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise JsonlError(f"{path}:{lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
            except RecursionError:
                raise JsonlError(f"{path}:{lineno}:1: not valid JSON: nested too deeply") from None
            except ValueError as exc:  # e.g. an integer with more digits than Python converts
                raise JsonlError(f"{path}:{lineno}:1: not valid JSON: {str(exc).split(';')[0]}") from None
            yield lineno, value
