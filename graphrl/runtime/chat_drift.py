"""Diagnostics of a conversation thread that is not append-only: the errors `ChatThread.prepare`
raises, with the first differing characters and the message they belong to, and the strict-mode
check that a delta starts at a token boundary of the from-scratch rendering.

Input: the text a thread's ids stand for, the new rendering, the conversation. Output: a located
`NotAppendOnlyError`, or a `DeltaMismatchError` raised. Pure functions (the render and encode
callables are the thread's); nothing here changes a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

EXCERPT = 40


class NotAppendOnlyError(ValueError):
    """Rendering the continued conversation changes text the thread's tokens already cover."""

    def __init__(self, message: str, *, message_index: int | None, position: int, expected: str, actual: str):
        super().__init__(message)
        self.message_index = message_index  # index into the thread's messages, None: template glue
        self.position = position  # first differing character of the rendered text
        self.expected = expected  # the thread's text from `position` (an excerpt)
        self.actual = actual  # the new rendering from `position` (an excerpt)


class DeltaMismatchError(ValueError):
    """strict mode: a delta tokenises differently than the from-scratch rendering does."""


def check_boundary(encode: Callable[[str], tuple[list[int], Any]], rendered: str, pos: int, ids: list[int]) -> None:
    """strict: the from-scratch tokenisation of `rendered` has a token boundary at `pos` and
    tokenises the rest to exactly `ids` (O(conversation): a debugging aid, off by default)."""
    full, enc = encode(rendered)
    if enc is not None and pos < len(rendered):
        at = enc.char_to_token(pos)
        ok = at is not None and enc.token_to_chars(at)[0] == pos and full[at:] == ids
    else:
        ok = full[len(full) - len(ids) :] == ids
    if not ok:
        raise DeltaMismatchError(
            f"the delta {rendered[pos : pos + EXCERPT]!r} does not start at a token boundary "
            f"of the full rendering (it merges with {rendered[max(0, pos - 10) : pos]!r}): its "
            f"ids {ids[:8]} differ from the from-scratch ids {full[len(full) - len(ids) :][:8]}"
        )


def drift_error(
    old: str,
    rendered: str,
    history: Sequence[dict[str, Any]],
    *,
    n_messages: int,
    output_start: int | None,
    render: Callable[[list[dict[str, Any]]], str],
) -> NotAppendOnlyError:
    """The error for a rendering that does not extend `old`. `history`: the thread's `n_messages`
    messages then the new ones; `output_start`: where the last output's text starts in `old` when
    the thread has just answered (else None); `render`: a prefix of messages -> text, no
    generation prompt."""
    p = common_prefix(old, rendered)
    index = _message_at(p, history[:n_messages], output_start, render)
    where = (
        "the generation prompt / template glue"
        if index is None
        else (f"message {index} ({history[index].get('role')!r})")
    )
    if index is not None and index == n_messages - 1 and output_start is not None and p >= output_start:
        where += ", the model's own output: the template does not reproduce it verbatim"
    return NotAppendOnlyError(
        f"chat template is not append-only: rendering the conversation with {len(history) - n_messages} new "
        f"message(s) changes text the thread already holds, at character {p} in {where}: "
        f"the thread has {old[p : p + EXCERPT]!r} but the template now renders "
        f"{rendered[p : p + EXCERPT]!r}",
        message_index=index,
        position=p,
        expected=old[p : p + EXCERPT],
        actual=rendered[p : p + EXCERPT],
    )


def _message_at(
    position: int,
    messages: Sequence[dict[str, Any]],
    output_start: int | None,
    render: Callable[[list[dict[str, Any]]], str],
) -> int | None:
    """Index of the thread message whose rendering covers `position` (error path only)."""
    if output_start is not None and position >= output_start:
        return len(messages) - 1
    for j in range(1, len(messages) + 1):
        try:
            end = len(render(list(messages[:j])))
        except Exception:  # some templates refuse partial conversations
            continue
        if end > position:
            return j - 1
    return None


def common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search on equal prefixes: O(n log n) char compares in C
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
