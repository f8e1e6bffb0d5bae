"""The local engine's LRU of KV caches, with a fake KV object (a list of positions)."""

from __future__ import annotations

from graphrl.engines.prefix_cache import PrefixCache, common_prefix_len


class FakeKV:
    def __init__(self, tokens):
        self.tokens = list(tokens)

    def crop(self, n):
        assert n < 0
        del self.tokens[n:]


def test_common_prefix_len():
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    long = list(range(2000))
    assert common_prefix_len(long, long[:1500] + [-1]) == 1500
    assert common_prefix_len(tuple(long), tuple(long)) == 2000


def test_miss_then_hit_hands_over_an_exact_prefix():
    cache = PrefixCache(capacity=2)
    assert cache.take([1, 2, 3]) == (None, 0)
    kv = FakeKV([1, 2, 3])
    cache.put([1, 2, 3], kv)
    got, n = cache.take([1, 2, 3, 4, 5])
    assert got is kv and n == 3 and len(cache) == 0  # handed over, not shared


def test_partial_hit_copies_and_crops():
    cache = PrefixCache()
    kv = FakeKV([1, 2, 3, 4])
    cache.put([1, 2, 3, 4], kv)
    got, n = cache.take([1, 2, 9])
    assert n == 2 and got.tokens == [1, 2] and got is not kv
    assert kv.tokens == [1, 2, 3, 4] and len(cache) == 1


def test_full_match_keeps_one_token_to_compute():
    cache = PrefixCache()
    cache.put([1, 2, 3], FakeKV([1, 2, 3]))
    got, n = cache.take([1, 2, 3])
    assert n == 2 and got.tokens == [1, 2]


def test_longest_match_wins_and_lru_eviction():
    cache = PrefixCache(capacity=2)
    cache.put([1, 2], FakeKV([1, 2]))
    cache.put([5, 6, 7], FakeKV([5, 6, 7]))
    cache.put([8, 9], FakeKV([8, 9]))  # evicts [1, 2]
    assert cache.keys() == [(5, 6, 7), (8, 9)]
    got, n = cache.take([5, 6, 0])
    assert n == 2
    cache.put([1, 1], FakeKV([1, 1]))  # [5,6,7] was used last: [8, 9] goes
    assert cache.keys() == [(5, 6, 7), (1, 1)]


def test_put_drops_entries_that_are_prefixes_and_respects_token_budget():
    cache = PrefixCache(capacity=4, max_tokens=5)
    cache.put([1, 2], FakeKV([1, 2]))
    cache.put([1, 2, 3], FakeKV([1, 2, 3]))
    assert cache.keys() == [(1, 2, 3)]
    cache.put([7, 8, 9], FakeKV([7, 8, 9]))  # 6 tokens > 5: oldest goes
    assert cache.keys() == [(7, 8, 9)]
    cache.put(list(range(6)), FakeKV(range(6)))  # larger than the budget: not stored
    assert cache.keys() == [(7, 8, 9)]
    PrefixCache(capacity=0).put([1], FakeKV([1]))
