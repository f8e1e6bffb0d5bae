"""Tokenisation time, measured apart from the rest of a client's CPU time.

`TimedTokenizer(tokenizer)` behaves like the Hugging Face tokenizer it wraps (attributes and methods
are delegated) but adds the CPU time (per-thread, `time.thread_time`) of every text -> ids call of
the Rust tokenizer (`tokenizers.Tokenizer.encode` / `encode_batch`) to `encode_s`. The clock sits at
the same point for every system: the hand-written baselines reach it through `tok.encode(...)`
(the Hugging Face wrapper's Python around it is their own client overhead), graphrl's chat renderer
calls the backend directly. Decoding is timed apart in `decode_s` and, like template rendering,
stays in the "overhead" part. `install(clock_path)` points graphrl's slime target and the baselines at one
shared timed tokenizer.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any


class _Clock:
    def __init__(self) -> None:
        self.encode_s = 0.0
        self.decode_s = 0.0
        self._lock = threading.Lock()

    def add(self, dt: float) -> None:
        with self._lock:
            self.encode_s += dt

    def add_decode(self, dt: float) -> None:
        with self._lock:
            self.decode_s += dt


class _TimedBackend:
    def __init__(self, inner: Any, clock: _Clock):
        self._inner, self._clock = inner, clock

    def _timed(self, method: str, add: Any, a: tuple, k: dict) -> Any:
        t = time.thread_time()
        try:
            return getattr(self._inner, method)(*a, **k)
        finally:
            add(time.thread_time() - t)

    def encode(self, *a: Any, **k: Any) -> Any:
        return self._timed("encode", self._clock.add, a, k)

    def encode_batch(self, *a: Any, **k: Any) -> Any:
        return self._timed("encode_batch", self._clock.add, a, k)

    def decode(self, *a: Any, **k: Any) -> Any:
        return self._timed("decode", self._clock.add_decode, a, k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TimedTokenizer:
    """The Hugging Face tokenizer, its Rust backend (`_tokenizer`, what `backend_tokenizer` returns
    and what every HF encode/decode path calls) replaced by a `_TimedBackend`; everything else is
    delegated untouched."""

    def __init__(self, tokenizer: Any, clock: _Clock | None = None):
        self.clock = clock or _Clock()
        if not isinstance(tokenizer._tokenizer, _TimedBackend):
            tokenizer._tokenizer = _TimedBackend(tokenizer._tokenizer, self.clock)
        self._tok = tokenizer

    def __call__(self, *a: Any, **k: Any) -> Any:
        return self._tok(*a, **k)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)


@functools.lru_cache(maxsize=2)
def _load(path: str) -> TimedTokenizer:  # one per process: cells run in one process share it
    from transformers import AutoTokenizer

    return TimedTokenizer(AutoTokenizer.from_pretrained(path))


def install(hf_checkpoint: str, *, graphrl: bool) -> TimedTokenizer:
    """Load the tokenizer once, wrap it, and make the baselines (and, if `graphrl`, graphrl's slime
    target -- imported only then, so a baseline's process never loads graphrl) use it."""
    from .baselines import common

    timed = _load(hf_checkpoint)
    loader = lambda path: timed
    common.load_tokenizer = loader
    if graphrl:
        import graphrl.compilers.slime._tokenizer as graphrl_tok

        graphrl_tok.load_tokenizer = loader
    return timed
