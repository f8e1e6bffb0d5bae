r"""Exact tokenisation of repeated prompt text: text -> ids, pieces between added tokens memoised.

Input: a Hugging Face tokenizer (its `backend_tokenizer`, a `tokenizers.Tokenizer`). Output:
`SegmentMemo.for_tokenizer(tok)`, or None where the tokenizer is not one this can tokenise exactly
in pieces; `memo.encode(text)` -> a list of ids.

Why: every rollout of a graph starts its prompts from the same long text -- a system prompt, the tool
descriptions the chat template writes, a task's instructions -- and the same prompt goes out once
per sample of a group. A hand-written loop tokenises all of it every time; on a ToolOrchestra
benchmark cell about half of the characters tokenised were a repeat of a piece between two special
tokens (`<|im_start|>system ... <|im_end|>`).

Why it is exact: a `tokenizers.Tokenizer` first splits its input at its added tokens (`<|im_start|>`,
`<tool_call>`, ...: leftmost, longest match, on the raw text), then normalises, pre-tokenises and
runs the model on each piece between them on its own, and adds one id per added token. So, for
text A, added token T and text B, encode(A + T + B) == encode(A) + [id(T)] + encode(B): a piece's
ids do not depend on what stands around it. That holds when
- no added token strips whitespace around it, matches single words only, or is matched after
  normalisation (`lstrip`, `rstrip`, `single_word`, `normalized` all false);
- the normaliser, pre-tokeniser and model treat every piece alike wherever it stands: a Metaspace
  pre-tokeniser that prefixes only the text's first piece (`prepend_scheme: first`), a ByteLevel one
  that adds a prefix space, BPE dropout, truncation or padding -- or any component not on the lists
  below -- make `for_tokenizer` return None, and the caller encodes whole texts as before; so does a
  tokenizer that tokenises its special tokens as text (`encode_special_tokens`, `split_special_tokens`).

Line boundaries too, for Qwen2's pre-tokeniser: a piece between added tokens is also cut after a
newline that is followed by a printable ASCII character other than a space (`\n` then `[!-~]`), so
a long prompt that quotes text seen before (an expert's prompt that repeats the documents and notes
of the conversation so far) reuses the lines it shares with it. Exact because, with text A ending in
`\n` and text B starting with such a character:
- NFC (and the other normalisers allowed) acts on A + B as on A and B apart: a newline and an ASCII
  character are starters that compose with nothing on the other side;
- the Split regex (Qwen2's, exactly) finds the same pre-tokens in A + B as in A and in B: no
  alternative can take a newline and then go on with a non-space character, the match that ends A's
  last whitespace run is `\s*[\r\n]+`, which needs nothing after it, and B's first match starts
  where it would in B alone;
- ByteLevel (without its own regex or a prefix space) and the BPE model act on each pre-token alone.
Other pre-tokenisers do not all share this (GPT-2's regex splits `"  \n"` differently when a word
follows), so the cut is made only for that exact regex and when no added token holds a newline.

Invariants:
- `encode(text) == backend.encode(text, add_special_tokens=False).ids` for every text
  (tests/models/test_segments.py checks random compositions of added tokens, whitespace and
  Unicode against `tokenizers` itself, on the real Qwen tokenizer);
- at line starts a piece is cut only once it has `line_chars` characters (short lines join the
  lines after them), so a prompt of short lines is kept in a few pieces; line starts are found by a
  pattern of their own, a fast scan for the newline (in one alternation with the added tokens, the
  regex engine would try every character: 0.75 ms more per MemAgent call, measured);
- a piece is memoised the second time it is seen (a piece seen once costs no extra call into the
  tokenizer) and only when it has at least `min_chars` characters; the memo is bounded
  (`max_pieces` pieces and `max_chars` characters, oldest first out; what it remembers as seen once
  is bounded too, and forgotten all at once when full) and belongs to its renderer: no state outside
  the object; its state changes under a lock, so threads may share it (a foreach node tokenises its
  document in a worker thread).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from .bytelevel import fast_backend

__all__ = ["SegmentMemo"]

_ABSENT = object()  # `dict.pop`'s default: a piece not remembered as seen

# Components that act on each piece the same way wherever it stands in the text.
_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Sequence"}
_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit", "Sequence"}
_MODELS = {"BPE", "WordPiece", "WordLevel", "Unigram"}
# Qwen2's pre-tokeniser regex: its pre-tokens never straddle a newline followed by a non-space
# (module docstring), so pieces may also be cut there.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _components_ok(node: Any, allowed: set[str], children: str) -> bool:
    if node is None:
        return True
    kind = node.get("type")
    if kind not in allowed:
        return False
    if kind == "ByteLevel" and node.get("add_prefix_space"):
        return False
    return all(_components_ok(child, allowed, children) for child in node.get(children) or ())


def exact_in_pieces(config: dict[str, Any]) -> bool:
    """Whether a tokenizer tokenises text between added tokens independently of what stands around it
    (the module docstring's conditions). `config`: the keys of its `to_str()` JSON that matter here
    (truncation, padding, added_tokens, model type and dropout, normalizer, pre_tokenizer)."""
    if config.get("truncation") is not None or config.get("padding") is not None:
        return False
    for token in config.get("added_tokens") or ():
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word") or token.get("normalized"):
            return False
    model = config.get("model") or {}
    if model.get("type") not in _MODELS or model.get("dropout"):
        return False
    return _components_ok(config.get("normalizer"), _NORMALIZERS, "normalizers") and _components_ok(
        config.get("pre_tokenizer"), _PRE_TOKENIZERS, "pretokenizers"
    )


def cuts_at_lines(config: dict[str, Any]) -> bool:
    """Whether pieces may also be cut at line starts (after a newline that a printable, non-space
    ASCII character follows): the pre-tokeniser is Qwen2's Split regex (isolated matches) then a
    ByteLevel that adds no prefix space and runs no regex of its own, and no added token holds a
    newline (cuts are made between added tokens only; this keeps them clear of one by construction
    too). On top of `exact_in_pieces(config)`."""
    if any("\n" in (t.get("content") or "") for t in config.get("added_tokens") or ()):
        return False
    pre = config.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2:
        return False
    split, byte_level = steps
    return (
        split.get("type") == "Split"
        and split.get("pattern") == {"Regex": QWEN2_SPLIT}
        and split.get("behavior") == "Isolated"
        and not split.get("invert")
        and byte_level.get("type") == "ByteLevel"
        and not byte_level.get("add_prefix_space")
        and not byte_level.get("use_regex")
    )


def tokenizer_config(backend: Any) -> dict[str, Any]:
    """What `exact_in_pieces` and `cuts_at_lines` read of a `tokenizers.Tokenizer`: the components' own
    JSON (the whole tokenizer's `to_str()` costs ~0.3 s for Qwen). AttributeError, TypeError or
    ValueError for an object that is not one."""
    return {
        "truncation": backend.truncation,
        "padding": backend.padding,
        "added_tokens": [
            {k: getattr(t, k) for k in ("content", "lstrip", "rstrip", "single_word", "normalized")}
            for t in backend.get_added_tokens_decoder().values()
        ],
        "model": {"type": type(backend.model).__name__, "dropout": getattr(backend.model, "dropout", None)},
        "normalizer": _state(backend.normalizer),
        "pre_tokenizer": _state(backend.pre_tokenizer),
    }


def _state(component: Any) -> Any:
    """A normaliser's or pre-tokeniser's JSON configuration (None for none)."""
    return None if component is None else json.loads(component.__getstate__())


class SegmentMemo:
    """`encode(text)`: the backend's ids for `text`, with long pieces between added tokens memoised."""

    def __init__(
        self,
        backend: Any,
        added: list[str],
        *,
        lines: bool = False,
        line_chars: int = 64,
        min_chars: int = 64,
        max_pieces: int = 4096,
        max_chars: int = 1 << 22,
    ):
        self._backend = backend
        # leftmost match; at one position the longest added token first (what `tokenizers` matches)
        if not added:
            raise ValueError("a segment memo needs the tokenizer's added tokens: its pieces lie between them")
        self.line_chars = line_chars
        self._split = re.compile("|".join(re.escape(a) for a in sorted(set(added), key=len, reverse=True))).finditer
        # in a piece, a cut after each newline before a printable, non-space ASCII character (a
        # separate pattern: one that starts with a literal is a fast scan, an alternation with the
        # added tokens would be tried at every character)
        self._line_starts = re.compile(r"\n(?=[!-~])").finditer if lines else None
        # memoised: at most max_pieces pieces and max_chars characters (about a quarter as many ids);
        # remembered as seen once: at most 4 x max_pieces pieces and max_chars characters
        self.min_chars, self.max_pieces, self.max_chars = min_chars, max_pieces, max_chars
        self._lock = threading.Lock()  # one memo serves the event loop and foreach's worker threads
        self._pieces: dict[str, list[int]] = {}
        self._seen: dict[str, None] = {}
        self._piece_chars = self._seen_chars = 0

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, **options: Any) -> SegmentMemo | None:
        """A memo for a fast tokenizer that tokenises exactly in pieces, else None."""
        backend = fast_backend(tokenizer)
        if backend is None or getattr(backend, "encode_special_tokens", False):  # special tokens as text
            return None
        try:
            config = tokenizer_config(backend)
        except (AttributeError, TypeError, ValueError):
            return None
        contents = [t["content"] for t in config["added_tokens"] if t["content"]]
        if not contents or not exact_in_pieces(config):  # no added token: no piece to keep
            return None
        return cls(backend, contents, **{"lines": cuts_at_lines(config), **options})

    @property
    def lines(self) -> bool:
        """Whether pieces are also cut at line starts."""
        return self._line_starts is not None

    def _whole(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=False).ids

    def encode(self, text: str) -> list[int]:
        if len(text) < self.min_chars:
            return self._whole(text)
        ids: list[int] = []
        start = 0  # the first character not yet tokenised
        piece_start = 0
        for m in self._split(text):
            start = self._between(text, piece_start, m.start(), start, ids)
            piece_start = m.end()
        start = self._between(text, piece_start, len(text), start, ids)
        if start < len(text):
            ids += self._whole(text[start:])
        return ids

    def _between(self, text: str, a: int, b: int, start: int, ids: list[int]) -> int:
        """text[a:b], between added tokens: one piece, or (`lines`) pieces cut at line starts, each
        of at least `line_chars` characters (short lines join the lines after them)."""
        if self._line_starts is not None and b - a >= 2 * self.line_chars:
            for m in self._line_starts(text, a, b):
                cut = m.end()
                if cut - a >= self.line_chars:
                    start = self._piece(text, a, cut, start, ids)
                    a = cut
        return self._piece(text, a, b, start, ids)

    def _piece(self, text: str, a: int, b: int, start: int, ids: list[int]) -> int:
        """The piece text[a:b] (between added tokens or line starts): when memoised (or seen before),
        tokenise what precedes it since `start`, then add its ids; returns the new `start`. The memo changes under
        its lock (a foreach node tokenises its document in a worker thread through the same memo as
        the event loop's prompts); the tokenizer runs outside it."""
        n = b - a
        if n < self.min_chars or n > self.max_chars:
            return start
        piece = text[a:b]
        with self._lock:
            hit = self._pieces.get(piece)
            if hit is None:
                if self._seen.pop(piece, _ABSENT) is _ABSENT:  # first sight: remembered, not tokenised alone
                    if len(self._seen) >= 4 * self.max_pieces or self._seen_chars + n > self.max_chars:
                        self._seen.clear()
                        self._seen_chars = 0
                    self._seen[piece] = None
                    self._seen_chars += n
                    return start
                self._seen_chars -= n
        if hit is None:  # the second sight: tokenised on its own and kept
            hit = self._whole(piece)
            with self._lock:
                if piece not in self._pieces:
                    while self._pieces and (
                        len(self._pieces) >= self.max_pieces or self._piece_chars + n > self.max_chars
                    ):  # the oldest out first
                        oldest = next(iter(self._pieces))
                        del self._pieces[oldest]
                        self._piece_chars -= len(oldest)
                    self._pieces[piece] = hit
                    self._piece_chars += n
        if start < a:
            ids += self._whole(text[start:a])
        ids += hit
        return b
