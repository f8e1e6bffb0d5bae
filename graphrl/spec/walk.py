"""Walk the strings of a nested YAML value (dicts, lists), with their paths.

Input: a value and its path. Output: (path, string) pairs, depth first, in document order; with
`keys_too`, a dict key holding `{` is yielded too, at path + (key, "<key>").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def walk_strings(value: Any, path: tuple, *, keys_too: bool = False) -> Iterator[tuple[tuple, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if keys_too and isinstance(k, str) and "{" in k:
                yield path + (k, "<key>"), k
            yield from walk_strings(v, path + (k,), keys_too=keys_too)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from walk_strings(v, path + (i,), keys_too=keys_too)
