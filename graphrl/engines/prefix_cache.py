"""A small LRU of KV caches keyed by the token sequence they hold (the local engine's prefix cache).

Input: `take(input_ids)` before a request; `put(token_ids, kv)` after it (kv holds exactly those
token positions).
Output: `(kv, n)`: a KV cache holding the first `n` tokens of `input_ids` (the longest common prefix
with any entry, capped at len(input_ids) - 1 so the model always gets at least one new token to
produce next-token logits), or `(None, 0)` on a miss.

Invariants: an entry's KV cache is never shared by two live requests: when the whole entry is a
prefix of the request it is handed over (removed; the request's own `put` replaces it with a longer
entry that has the same prefix), otherwise a deep copy is cropped. Entries are evicted least recently
used first when over `capacity` entries or `max_tokens` tokens. Not thread-safe: the local engine
calls it from its single worker thread only. KV objects are duck-typed: deep-copyable, and
`crop(-k)` drops the last k positions (transformers' `DynamicCache`, in both 4.x and 5.x).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    lo = 0
    step = 512
    while lo + step <= n and a[lo : lo + step] == b[lo : lo + step]:
        lo += step
    while lo < n and a[lo] == b[lo]:
        lo += 1
    return lo


class PrefixCache:
    def __init__(self, capacity: int = 4, max_tokens: int = 65536):
        if capacity < 0 or max_tokens < 0:
            raise ValueError("capacity and max_tokens must be >= 0")
        self.capacity = capacity
        self.max_tokens = max_tokens
        self._entries: OrderedDict[tuple[int, ...], Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[tuple[int, ...]]:
        return list(self._entries)

    def take(self, input_ids: Sequence[int]) -> tuple[Any | None, int]:
        ids = tuple(input_ids)
        limit = len(ids) - 1
        best_key, best_len = None, 0
        for key in self._entries:
            n = min(common_prefix_len(key, ids), limit)
            if n > best_len:
                best_key, best_len = key, n
        if best_key is None:
            return None, 0
        if best_len == len(best_key):
            return self._entries.pop(best_key), best_len
        self._entries.move_to_end(best_key)
        kv = copy.deepcopy(self._entries[best_key])
        kv.crop(best_len - len(best_key))  # negative: drop that many trailing positions
        return kv, best_len

    def put(self, token_ids: Sequence[int], kv: Any) -> None:
        key = tuple(token_ids)
        if not key or self.capacity == 0 or len(key) > self.max_tokens:
            return
        # An entry that is a prefix of the new one adds nothing the new one cannot serve.
        for old in [k for k in self._entries if len(k) <= len(key) and key[: len(k)] == k]:
            del self._entries[old]
        self._entries[key] = kv
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity or self._total() > self.max_tokens:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def _total(self) -> int:
        return sum(len(k) for k in self._entries)
