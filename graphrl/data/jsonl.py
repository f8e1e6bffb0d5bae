"""JSONL files -> (line number, value) pairs, or one located error.

Input: a path. Output: an iterator of `(lineno, value)` for every non-blank line.
Invariant: any bad line -- longer than the row bound, not UTF-8, not JSON, nested past Python's
recursion limit, a number Python will not convert -- raises `JsonlError` (a ValueError) located at it as file:line:col;
nothing else is raised for the file's content. Lines end with \\n (\\r\\n works too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JsonlError(ValueError):
    pass


MAX_LINE_BYTES = 32 << 20  # one row / document: larger lines are refused before they are decoded


def _lines(f: Any, max_bytes: int) -> Iterator[bytes]:
    """The file's lines, each read with a bound: an over-long line raises after max_bytes + 1 bytes."""
    while True:
        raw = f.readline(max_bytes + 1)
        if not raw:
            return
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            raise OverflowError
        yield raw


def iter_jsonl(path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any]]:
    """`max_line_bytes`: a longer line is a located JsonlError, read no further than the bound."""
    with open(path, "rb") as f:
        lines = _lines(f, max_line_bytes)
        lineno = 0
        while True:
            lineno += 1
            try:
                raw = next(lines)
            except StopIteration:
                return
            except OverflowError:
                raise JsonlError(
                    f"{path}:{lineno}:1: the line is longer than {max_line_bytes} bytes (the row size "
                    "bound; graphrl run --max-row-bytes raises it)"
                ) from None
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
