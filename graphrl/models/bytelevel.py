"""Byte-level BPE decoding from a table: token ids -> text, as the tokenizer's own decode gives it.

Input: a Hugging Face tokenizer (its `backend_tokenizer`, a `tokenizers.Tokenizer`). Output:
`ByteDecoder.for_tokenizer(tok)`, or None where the tokenizer is not one this can mirror exactly.

Why: a byte-level BPE tokenizer (GPT-2, Qwen, Llama 3) decodes by mapping every token to its bytes
and reading the bytes as UTF-8, invalid sequences replaced by U+FFFD. The runtime decodes every
engine output (and slime's response text once per sample); through `tokenizers` that costs a
call into Rust, a list copy and a token-string pass. A table of each id's bytes makes it
`b"".join(...)` and one UTF-8 decode: the 3,327 decodes of one ToolOrchestra benchmark cell,
replayed, take 18 ms instead of 75 (about 5 us each instead of 22).

Invariants:
- Only the decoder `tokenizers.decoders.ByteLevel` alone is mirrored (`add_prefix_space`,
  `trim_offsets` and `use_regex` do not act on decoding); a Sequence, Metaspace, WordPiece, ...
  decoder, a tokenizer that splits special tokens, or added tokens that `tokenizers` decodes
  otherwise than the table (checked for each added token when the table is built) give None, and
  the caller keeps the tokenizer's decode.
- A token whose every character is in the byte alphabet decodes to those bytes; any other token to
  its own UTF-8 -- what `tokenizers`' ByteLevel decoder does, added tokens (`<|im_end|>`) included.
  `decode` equals `backend.decode(ids, skip_special_tokens=False)`; an id outside the table raises
  KeyError (the caller falls back to the tokenizer, which has the final word).
- CPython's UTF-8 decoder and Rust's `from_utf8_lossy` both replace each maximal invalid
  subpart by one U+FFFD (Unicode's recommended practice), so partial characters come out alike;
  tests/models/test_bytelevel.py checks whole vocabularies and random id sequences against
  `tokenizers` itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ["ByteDecoder", "byte_alphabet", "fast_backend"]


# Tables by tokenizer object, weakly keyed: a derived, read-only value of the tokenizer (renderers,
# their variants and every executor on one tokenizer share one ~5 MB table). A tokenizer that gains
# tokens later is still decoded right: their ids are outside the table, which the caller's fallback handles.
_TABLES: weakref.WeakKeyDictionary[Any, ByteDecoder | None] = weakref.WeakKeyDictionary()


def byte_alphabet() -> dict[str, int]:
    """The byte-level alphabet: the printable character that stands for each byte -> the byte.
    Printable Latin-1 bytes stand for themselves; the other 68 get U+0100 onwards, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            out[chr(256 + extra)] = b
            extra += 1
    return out


def fast_backend(tokenizer: Any) -> Any | None:
    """The `tokenizers.Tokenizer` behind a Hugging Face tokenizer (or the object itself, which may be
    one), or None where the tokenizer splits its special tokens into text: what the Rust backend's
    tables and splits would get wrong. Whether the object really is a backend is the caller's check."""
    if getattr(tokenizer, "split_special_tokens", False):
        return None
    return getattr(tokenizer, "backend_tokenizer", tokenizer)


class ByteDecoder:
    """id -> bytes for a byte-level BPE tokenizer; `decode(ids)` -> text (see module doc). The table
    is a tuple indexed by id (denser in memory than a dict: a decode is mostly cache misses)."""

    __slots__ = ("_bytes", "_get")

    def __init__(self, table: dict[int, bytes]) -> None:
        size = max(table, default=-1) + 1
        if len(table) != size or min(table, default=0) < 0:
            raise ValueError("a byte table needs every id from 0 to its largest")
        self._bytes: tuple[bytes, ...] = tuple(table[i] for i in range(size))
        self._get = self._bytes.__getitem__

    def __len__(self) -> int:
        return len(self._bytes)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids` (KeyError for an id the table does not have)."""
        try:
            if ids and min(ids) < 0:
                raise IndexError
            return b"".join(map(self._get, ids)).decode("utf-8", "replace")
        except (IndexError, TypeError):
            raise KeyError("an id outside the byte table") from None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> ByteDecoder | None:
        """The table for `tokenizer` (a Hugging Face tokenizer or a `tokenizers.Tokenizer`), or None
        where its decoding is not plain byte-level (the module doc lists when). Built once per
        tokenizer object (~0.1-0.3 s for Qwen's 151,669 ids) and kept while that object lives."""
        try:
            return _TABLES[tokenizer]
        except (KeyError, TypeError):  # not built yet, or an object that cannot be weakly keyed
            pass
        table = cls._build(tokenizer)
        try:
            _TABLES[tokenizer] = table
        except TypeError:
            pass
        return table

    @classmethod
    def _build(cls, tokenizer: Any) -> ByteDecoder | None:
        backend = fast_backend(tokenizer)
        if backend is None:
            return None
        try:
            decoder = backend.decoder
            vocab = backend.get_vocab(with_added_tokens=False)
            added = backend.get_added_tokens_decoder()
        except Exception:  # not a tokenizers.Tokenizer (a slow tokenizer, a test double)
            return None
        if type(decoder).__name__ != "ByteLevel" or type(decoder).__module__ != "tokenizers.decoders":
            return None
        # alphabet characters -> chr(their byte); a Latin-1 character outside the alphabet (a space,
        # U+0080..U+00A0, U+00AD) -> U+FFFF, so latin-1 encoding fails for it as for any other
        to_byte = {c: "\uffff" for c in range(256)} | {ord(c): chr(b) for c, b in byte_alphabet().items()}
        table: dict[int, bytes] = {}
        for token, tid in sorted(vocab.items(), key=lambda kv: kv[1]):  # id order: nearby in memory
            table[tid] = _token_bytes(token, to_byte)
        for tid, token in added.items():
            content = getattr(token, "content", None)
            if not isinstance(tid, int) or not isinstance(content, str):
                return None
            # added tokens go through the decoder too; checked against `tokenizers`, never assumed
            table[tid] = _token_bytes(content, to_byte)
            if backend.decode([tid], skip_special_tokens=False) != table[tid].decode("utf-8", "replace"):
                return None
        if len(table) != max(table, default=-1) + 1:  # ids with no token: the tokenizer decodes them
            return None
        return cls(table)


def _token_bytes(token: str, to_byte: dict[int, str]) -> bytes:
    """A token's bytes: through the alphabet when every character is in it, else its own UTF-8."""
    try:  # latin-1 maps chr(b) back to b; U+FFFF (a character outside the alphabet) fails
        return token.translate(to_byte).encode("latin-1")
    except UnicodeEncodeError:
        return token.encode("utf-8")
