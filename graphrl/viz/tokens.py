"""Token ids -> what each token looks like, for token strips (HTML and terminal).

Input: a tokenizer choice (`qwen`, `tiny`, `smollm2`: graphrl's offline tokenizers; `none`: show ids;
else a local Hugging Face tokenizer directory), or none and the tokenizer a trajectory recorded, and
token ids.
Output: `TokenText` per id: its text when its bytes are valid UTF-8 on their own, otherwise its raw
bytes (a token that holds part of a multi-byte character; viewers join such runs and decode them
together), and whether it is a special/added token.

Invariants: the tokenizer is imported lazily and only once per `Vocab`; a tokenizer the user named
that cannot be loaded is `TokenizerUnavailable` (the command exits 2); the recorded one missing is
not an error: `load_vocab` falls back (qwen, then ids) and returns a notice saying why. Model output is never
re-tokenised here: ids are only looked up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TokenText:
    text: str | None  # None: `raw` holds bytes that are not valid UTF-8 by themselves
    raw: bytes = b""
    special: bool = False


class Vocab:
    """Looks token ids up in a tokenizer (or shows them as ids when `tokenizer` is None)."""

    def __init__(self, name: str, tokenizer: Any | None = None):
        self.name = name
        self._tok = tokenizer
        self._byte_map: dict[str, int] | None = None

    def _bytes_of(self, piece: str) -> bytes | None:
        if self._byte_map is None:
            from ..models.tokenizer import byte_to_unicode

            self._byte_map = {c: b for b, c in byte_to_unicode().items()}
        try:
            return bytes(self._byte_map[c] for c in piece)
        except KeyError:
            return None

    def lookup(self, ids: Iterable[int]) -> dict[int, TokenText]:
        ids = sorted(set(ids))
        if self._tok is None:
            return {i: TokenText(f"⟨{i}⟩", special=True) for i in ids}
        pieces = self._tok.convert_ids_to_tokens(ids)
        specials = set(getattr(self._tok, "all_special_ids", ()) or ())
        added = getattr(self._tok, "added_tokens_decoder", None) or {}
        out: dict[int, TokenText] = {}
        for i, piece in zip(ids, pieces):
            if piece is None:
                out[i] = TokenText(f"⟨{i}⟩", special=True)
            elif i in specials or i in added:
                out[i] = TokenText(piece, special=True)
            else:
                raw = self._bytes_of(piece)
                if raw is None:  # not byte-level BPE (e.g. sentencepiece): let the tokenizer decode it
                    out[i] = TokenText(self._tok.decode([i]))
                    continue
                try:
                    out[i] = TokenText(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    out[i] = TokenText(None, raw)
        return out


TOKENIZER_HELP = "qwen, tiny, smollm2, none (token ids), or a local tokenizer directory"


class TokenizerUnavailable(ValueError):
    """A tokenizer asked for by name that cannot be loaded here (offline, no download)."""


def load_tokenizer(spec: str) -> Any:
    """A built-in name (qwen/qwen2/qwen2.5/qwen3, tiny, smollm2) or a local directory -> tokenizer,
    offline. Raises `TokenizerUnavailable` (MissingDependency passes through)."""
    from ..errors import MissingDependency
    from ..models.registry import MODEL_NAMES, TOKENIZER_ALIASES, resolve_tokenizer

    if spec not in MODEL_NAMES and spec not in TOKENIZER_ALIASES and not Path(spec).expanduser().is_dir():
        raise TokenizerUnavailable(f"unknown tokenizer {spec!r}: use {TOKENIZER_HELP}")
    try:
        return resolve_tokenizer(spec)
    except MissingDependency:
        raise
    except Exception as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise TokenizerUnavailable(f"tokenizer {spec!r} cannot be loaded: {reason}") from None


def load_vocab(spec: str | None, recorded: str | None = None) -> tuple[Vocab, str | None]:
    """The vocabulary to show tokens with -> (Vocab, notice or None).

    `spec` given (the user's --tokenizer): that one or `TokenizerUnavailable`. `spec` None: the
    tokenizer the trajectory recorded; when it recorded none, or that one cannot be loaded here,
    Qwen's with a notice (token texts may be wrong) or, failing that, ids with a notice."""
    if spec == "none":
        return Vocab("ids"), None
    if spec is not None:
        return Vocab(spec, load_tokenizer(spec)), None
    note = None
    if recorded:
        try:
            return Vocab(recorded, load_tokenizer(recorded)), None
        except Exception as exc:
            note = (
                f"the run's tokenizer '{recorded}' is unavailable here ({exc}); token texts use qwen and may be wrong"
            )
    else:
        note = "the trajectory does not record its tokenizer (an older file?): token texts use qwen; pass --tokenizer"
    try:
        return Vocab("qwen", load_tokenizer("qwen")), note
    except Exception as exc:
        return Vocab("ids"), f"token texts unavailable ({exc}); showing token ids"


def join_texts(seq: Sequence[int], table: dict[int, TokenText]) -> list[str]:
    """Per-position display text: a run of partial-byte tokens shows its characters on the token that
    completes them (the earlier ones show ''); bytes that never form valid UTF-8 show as U+FFFD."""
    out: list[str] = []
    pending, start = b"", 0
    for pos, tid in enumerate(seq):
        t = table[tid]
        if t.text is not None:
            if pending:  # an unfinished run ends here
                out[start], pending = "\ufffd", b""
            out.append(t.text)
            continue
        if not pending:
            start = pos
        pending += t.raw
        try:
            out.append(pending.decode("utf-8"))
            pending = b""
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data" and len(pending) < 8:
                out.append("")
            else:
                out.append(pending.decode("utf-8", errors="replace"))
                pending = b""
    if pending:
        out[start] = "\ufffd"
    return out
