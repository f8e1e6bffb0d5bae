"""Prefix accounting for servers without a real prefix cache: token sequences -> cached-prefix length.

Input: token id sequences, as a server sees them (prompts when admitted, prompt + output when done).
Output: `match(ids)` = length of the longest prefix of `ids` that was inserted before, which is what
SGLang's radix cache reports as `cached_tokens` for an append-only multi-turn conversation.

A compressed radix tree (edges are tuples of ids, children keyed by their first id), bounded by
`capacity_tokens` stored ids: when over, least-recently-used leaves are evicted down to 90% of it.
Invariants: `tokens` == the sum of edge lengths; a node's `stamp` is >= its children's (every walk
stamps the whole path), so evicting the oldest leaf never orphans a more recent suffix.
Not thread-safe: use it from one event loop.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

__all__ = ["PrefixTracker"]


class _Node:
    __slots__ = ("children", "edge", "parent", "stamp")

    def __init__(self, edge: tuple[int, ...], parent: _Node | None, stamp: int) -> None:
        self.children: dict[int, _Node] = {}
        self.edge = edge
        self.parent = parent
        self.stamp = stamp


def _common(edge: tuple[int, ...], ids: tuple[int, ...], pos: int) -> int:
    """Length of the common prefix of `edge` and `ids[pos:]` (edge[0] is known to match)."""
    k, limit = 1, min(len(edge), len(ids) - pos)
    while k < limit and edge[k] == ids[pos + k]:
        k += 1
    return k


class PrefixTracker:
    """A bounded radix tree of recently seen token sequences."""

    def __init__(self, capacity_tokens: int = 2_000_000) -> None:
        if capacity_tokens < 1:
            raise ValueError("capacity_tokens must be >= 1")
        self.capacity_tokens = capacity_tokens
        self.clear()

    def clear(self) -> None:
        self._root = _Node((), None, 0)
        self._clock = 0
        self.tokens = 0

    def match(self, ids: Sequence[int]) -> int:
        """Longest stored prefix of `ids` (marks the matched path as recently used)."""
        ids = tuple(ids)
        self._clock += 1
        clock, node, pos, n = self._clock, self._root, 0, len(ids)
        while pos < n:
            child = node.children.get(ids[pos])
            if child is None:
                break
            child.stamp = clock
            edge = child.edge
            end = pos + len(edge)
            if ids[pos:end] == edge:
                pos, node = end, child
                continue
            return pos + _common(edge, ids, pos)
        return pos

    def insert(self, ids: Sequence[int]) -> None:
        """Store `ids` (and so every prefix of it); evict old leaves when over capacity."""
        ids = tuple(ids[: self.capacity_tokens])
        self._clock += 1
        clock, node, pos, n = self._clock, self._root, 0, len(ids)
        while pos < n:
            child = node.children.get(ids[pos])
            if child is None:
                node.children[ids[pos]] = _Node(ids[pos:], node, clock)
                self.tokens += n - pos
                break
            child.stamp = clock
            edge = child.edge
            end = pos + len(edge)
            if ids[pos:end] == edge:
                pos, node = end, child
                continue
            k = _common(edge, ids, pos)
            if pos + k == n:  # ids end inside this edge: already stored
                break
            mid = _Node(edge[:k], node, clock)  # split the edge where ids diverge
            node.children[ids[pos]] = mid
            child.edge, child.parent = edge[k:], mid
            mid.children[edge[k]] = child
            pos, node = pos + k, mid
        if self.tokens > self.capacity_tokens:
            self._evict(int(self.capacity_tokens * 0.9))

    def _evict(self, target: int) -> None:
        heap: list[tuple[int, int, _Node]] = []
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node is not self._root:
                heap.append((node.stamp, id(node), node))
        heapq.heapify(heap)
        while heap and self.tokens > target:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            del parent.children[leaf.edge[0]]
            self.tokens -= len(leaf.edge)
            if not parent.children and parent is not self._root:
                heapq.heappush(heap, (parent.stamp, id(parent), parent))
