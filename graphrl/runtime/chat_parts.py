"""Labelling a thread delta's tokens: which ids are a new message's content (an observation) and
which are template text (turn markers, the generation prompt). Informational: every delta token has
mask 0 whatever its label; the labels become the `kind` of a training sample's spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeltaPart:
    """ids[start:end] of a delta: message content ("observation") or template text ("template")."""

    start: int
    end: int
    kind: str  # "observation" | "template"
    message_index: int | None  # the thread message whose content it is (observations only)


def label_parts(
    text: str, ids: list[int], enc: Any, messages: list[tuple[int, dict[str, Any]]]
) -> tuple[DeltaPart, ...]:
    """Split delta ids into observation (a new message's content) and template runs.

    Best effort, informational (every delta token has mask 0 whatever its label): a token is an
    observation of message i when its first character lies inside i's content, found in order in
    the delta text. Without character offsets (slow tokenizers) the whole delta is "template".
    """
    n = len(ids)
    if n == 0:
        return ()
    if enc is None:
        return (DeltaPart(0, n, "template", None),)
    cuts: list[tuple[int, int, int]] = []  # (first token, end token, message index)
    cursor = 0
    for index, message in messages:
        content = message.get("content")
        if not isinstance(content, str) or not content:
            continue
        at = text.find(content, cursor)
        if at < 0:
            continue
        cursor = at + len(content)
        first, end = _token_at_or_after(enc, at, n), _token_at_or_after(enc, cursor, n)
        if first < end:
            cuts.append((first, end, index))
    parts: list[DeltaPart] = []
    pos = 0
    for first, end, index in cuts:
        if first < pos:
            continue
        if pos < first:
            parts.append(DeltaPart(pos, first, "template", None))
        parts.append(DeltaPart(first, end, "observation", index))
        pos = end
    if pos < n:
        parts.append(DeltaPart(pos, n, "template", None))
    return tuple(parts)


def _token_at_or_after(enc: Any, char: int, n: int) -> int:
    """Index of the first token whose first character is at or after `char` (n if none)."""
    t = enc.char_to_token(char)
    if t is None:  # past the end of the text
        return n
    start, _ = enc.token_to_chars(t)
    return t if start >= char else t + 1
