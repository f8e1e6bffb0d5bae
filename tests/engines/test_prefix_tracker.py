"""PrefixTracker: longest previously seen prefix, against a brute-force model; bounded memory."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from graphrl.engines.prefix_tracker import PrefixTracker


def brute_match(stored: list[tuple[int, ...]], ids: tuple[int, ...]) -> int:
    best = 0
    for seq in stored:
        k = 0
        while k < min(len(seq), len(ids)) and seq[k] == ids[k]:
            k += 1
        best = max(best, k)
    return best


def count_tokens(tracker: PrefixTracker) -> int:
    total, stack = 0, [tracker._root]
    while stack:
        node = stack.pop()
        total += len(node.edge)
        stack.extend(node.children.values())
    return total


seqs = st.lists(st.integers(0, 3), min_size=0, max_size=12).map(tuple)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), seqs), max_size=30))
def test_matches_brute_force_without_eviction(ops):
    tracker, stored = PrefixTracker(capacity_tokens=10_000), []
    for is_insert, ids in ops:
        if is_insert:
            tracker.insert(ids)
            stored.append(ids)
        else:
            assert tracker.match(ids) == brute_match(stored, ids)
        assert tracker.tokens == count_tokens(tracker)
    for ids in stored:
        assert tracker.match(ids) == len(ids)


@settings(max_examples=200, deadline=None)
@given(st.lists(seqs, max_size=40), st.integers(1, 30))
def test_bounded_and_never_over_reports(inserts, capacity):
    tracker, stored = PrefixTracker(capacity_tokens=capacity), []
    for ids in inserts:
        tracker.insert(ids)
        stored.append(ids)
        assert tracker.tokens <= capacity
        assert tracker.tokens == count_tokens(tracker)
        for probe in stored[-3:]:
            assert tracker.match(probe) <= brute_match(stored, probe)


def test_evicts_least_recently_used_first():
    tracker = PrefixTracker(capacity_tokens=10)
    tracker.insert((1, 2, 3, 4))
    tracker.insert((5, 6, 7, 8))
    assert tracker.match((1, 2, 3, 4)) == 4  # touch: (5..8) is now the oldest
    tracker.insert((9, 10, 11))  # 11 tokens > 10: evict down to 9
    assert tracker.match((1, 2, 3, 4)) == 4
    assert tracker.match((5, 6, 7, 8)) == 0
    assert tracker.match((9, 10, 11)) == 3


def test_shared_prefixes_are_stored_once_and_clear():
    tracker = PrefixTracker()
    tracker.insert(range(100))
    tracker.insert(list(range(100)) + [7, 7])
    tracker.insert(list(range(50)) + [1])
    assert tracker.tokens == 100 + 2 + 1
    assert tracker.match(list(range(60)) + [0]) == 60
    tracker.clear()
    assert tracker.tokens == 0 and tracker.match(range(10)) == 0
