"""Structured output for the local engine: SGLang's `regex` / `json_schema` sampling params -> a mask
of the next tokens that keep the output inside the language, one step at a time.

Input: a tokenizer (any Hugging Face tokenizer; byte-level BPE tokens are mapped back to their
bytes), the model's logits width, and per request one pattern: `regex` (the whole output must match
it, as in SGLang) or `json_schema` (a JSON Schema as a string; outlines-core turns it into a regex).
Output: a `Constraint` per request: `mask(logits)` sets every token the language does not allow next
to -inf, `advance(token)` moves the automaton; once the pattern is complete only EOS stays allowed.

Library: `outlines-core` (a Rust automaton over the tokenizer's vocabulary, PyPI `outlines-core`,
installed with `graphrl[local]`); the import is lazy, its absence is a `MissingDependency` (exit 4)
when a request asks for structured output. `ebnf` grammars are not implemented here (400 from the
engine, see sampling.py); SGLang servers take all three.

Invariants: the vocabulary is built once per `Grammars` (one engine), the compiled index once per
pattern (LRU of 16; compiling a pattern with character classes over a 150k vocabulary takes
seconds on a CPU); special tokens other than EOS are never allowed; a pattern that is not a valid
regex (or a schema outlines-core cannot convert) is a `ValueError` with the library's message.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from graphrl.models.errors import require

INDEX_CACHE = 16


def token_bytes(tokenizer: Any) -> tuple[dict[bytes, list[int]], int]:
    """{token bytes: ids} for every non-special token, and the largest id seen (EOS included)."""
    from graphrl.models.tokenizer import byte_to_unicode

    u2b = {ch: b for b, ch in byte_to_unicode().items()}
    special = {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}
    special |= set(getattr(tokenizer, "all_special_ids", ()) or ())
    out: dict[bytes, list[int]] = {}
    top = int(tokenizer.eos_token_id)
    for text, i in tokenizer.get_vocab().items():
        top = max(top, i)
        if i in special:
            continue
        try:
            raw = bytes(u2b[c] for c in text)
        except KeyError:  # not byte-level BPE (e.g. sentencepiece): ask the tokenizer
            raw = tokenizer.convert_tokens_to_string([text]).encode("utf-8")
        if raw:
            out.setdefault(raw, []).append(i)
    return out, top


class Constraint:
    """One request's automaton state (see the module docstring)."""

    def __init__(self, guide: Any, words: int, torch: Any):
        self._guide = guide
        self._torch = torch
        self._bits = torch.zeros(words, dtype=torch.int32)
        self._shifts = torch.arange(32, dtype=torch.int32)

    def mask(self, logits: Any) -> Any:
        """`logits` with every disallowed token at -inf (a new tensor); raises ValueError when the
        automaton allows nothing (cannot happen for a pattern outlines-core compiled)."""
        torch = self._torch
        self._bits.zero_()
        self._guide.write_mask_into(self._bits.data_ptr(), self._bits.numel(), 4)
        allowed = ((self._bits.unsqueeze(-1) >> self._shifts) & 1).bool().view(-1)
        width = logits.shape[-1]
        keep = torch.zeros(width, dtype=torch.bool, device=logits.device)
        n = min(width, allowed.numel())
        keep[:n] = allowed[:n].to(logits.device)
        if not bool(keep.any()):
            raise ValueError("the output grammar allows no next token")
        return logits.masked_fill(~keep, float("-inf"))

    def advance(self, token: int) -> None:
        self._guide.advance(int(token), return_tokens=False)

    @property
    def finished(self) -> bool:
        return bool(self._guide.is_finished())


class Grammars:
    """Compiled patterns for one tokenizer (one per engine; used from its one worker thread)."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._vocab: Any = None
        self._words = 0
        self._indexes: OrderedDict[str, Any] = OrderedDict()

    def _vocabulary(self, oc: Any) -> Any:
        if self._vocab is None:
            eos = getattr(self._tokenizer, "eos_token_id", None)
            if not isinstance(eos, int):
                raise ValueError("structured output needs a tokenizer with an eos token")
            table, top = token_bytes(self._tokenizer)
            self._vocab = oc.Vocabulary(eos, table)
            self._words = (top + 1 + 31) // 32
        return self._vocab

    def constraint(self, *, regex: str | None = None, json_schema: str | None = None) -> Constraint:
        oc = require("outlines_core", "structured output (regex / json_schema) on the local engine")
        torch = require("torch", "the local engine")
        if json_schema is not None:
            try:
                regex = oc.json_schema.build_regex_from_schema(json_schema)
            except Exception as exc:
                raise ValueError(f"json_schema cannot be used: {exc}") from None
        if regex is None:
            raise ValueError("a constraint needs regex or json_schema")
        vocab = self._vocabulary(oc)
        index = self._indexes.pop(regex, None)
        if index is None:
            try:
                index = oc.Index(regex, vocab)
            except Exception as exc:
                raise ValueError(f"regex {regex!r} cannot be used: {exc}") from None
        self._indexes[regex] = index
        while len(self._indexes) > INDEX_CACHE:
            self._indexes.popitem(last=False)
        return Constraint(oc.Guide(index), self._words, torch)


def schema_text(value: Any) -> str:
    """A JSON Schema as SGLang takes it: a JSON string (dicts are dumped, strings kept)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
