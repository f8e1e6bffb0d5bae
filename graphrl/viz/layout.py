"""Layered (Sugiyama-style) layout: nodes + sizes + directed edges -> positions and edge routes.

Input: node ids in a meaningful order (the graph's), their (width, height), directed edges in order
(self-loops and cycles allowed), and root ids (the start) that go to the top layer.
Output: `Layout`: a centre box per node and, per input edge, a route (a polyline of points from
source to target, with the point where its label goes).

Steps (the classic ones, kept small):
  1. break cycles: depth-first search from the roots in input order; an edge to a node on the DFS
     stack is a back edge and is reversed (drawn upward, on the right: a visible loop);
  2. layers: longest path from the sources of the acyclic graph; ranks are doubled so that every
     edge crosses an odd "label rank" holding a dummy as wide as its label (labels never overlap
     nodes or each other, as in Graphviz);
  3. order within ranks: barycenter sweeps down and up, keeping the ordering with fewest crossings;
  4. x: repeated isotonic regression of each node towards the mean of its neighbours, keeping the
     order and a minimum gap; y: rank by rank.

Invariants: deterministic (ties broken by input order, no randomness, no hash order); coordinates
are rounded to 0.5 px; every input edge has exactly one route, in input order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

NODE_GAP = 28.0  # horizontal gap between neighbours in a rank
RANK_GAP = 16.0  # vertical gap between consecutive ranks
LOOP_OUT = 26.0  # how far a back edge or self-loop bulges to the right


@dataclass(frozen=True)
class Box:
    x: float  # centre
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Route:
    src: str
    dst: str
    points: tuple[tuple[float, float], ...]
    label_at: tuple[float, float] | None  # left end of the label's baseline
    back: bool  # drawn against the layering (a loop)
    self_loop: bool


@dataclass(frozen=True)
class Layout:
    boxes: dict[str, Box]
    routes: tuple[Route, ...]
    width: float
    height: float


def _r(v: float) -> float:
    return round(v * 2) / 2


def _break_cycles(nodes: Sequence[str], edges: Sequence[tuple[str, str]], roots: Sequence[str]) -> set[int]:
    """Indices of back edges found by an iterative DFS from the roots, then the remaining nodes, in order."""
    out: dict[str, list[tuple[int, str]]] = {n: [] for n in nodes}
    for i, (a, b) in enumerate(edges):
        if a != b:
            out[a].append((i, b))
    state: dict[str, int] = {}
    back: set[int] = set()
    for root in [*roots, *nodes]:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                continue
            i, b = nxt
            if state.get(b) == 1:
                back.add(i)
            elif b not in state:
                state[b] = 1
                stack.append((b, iter(out[b])))
    return back


def _layers(nodes: Sequence[str], dag: list[tuple[str, str]]) -> dict[str, int]:
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from(dag)
    pos = {n: i for i, n in enumerate(nodes)}
    layer: dict[str, int] = {}
    for n in nx.lexicographical_topological_sort(g, key=pos.__getitem__):
        layer[n] = max((layer[p] + 1 for p in g.predecessors(n)), default=0)
    return layer


def _crossings(ranks: list[list[str]], down: dict[str, list[str]], at: dict[str, int]) -> int:
    total = 0
    for rank in ranks[:-1]:
        segs = [(at[a], at[b]) for a in rank for b in down[a]]
        for i, (a1, b1) in enumerate(segs):
            for a2, b2 in segs[i + 1 :]:
                total += (a1 - a2) * (b1 - b2) < 0
    return total


def _order(ranks: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]]) -> list[list[str]]:
    def index(rs):
        return {n: i for r in rs for i, n in enumerate(r)}

    best, best_x = [list(r) for r in ranks], _crossings(ranks, down, index(ranks))
    cur = [list(r) for r in ranks]
    for sweep in range(16):
        at = index(cur)
        seq = range(1, len(cur)) if sweep % 2 == 0 else range(len(cur) - 2, -1, -1)
        for k in seq:
            nbrs = up if sweep % 2 == 0 else down
            keyed = []
            for i, n in enumerate(cur[k]):
                ps = [at[p] for p in nbrs[n]]
                keyed.append((sum(ps) / len(ps) if ps else float(i), i, n))
            cur[k] = [n for _, _, n in sorted(keyed)]
            at.update({n: i for i, n in enumerate(cur[k])})
        x = _crossings(cur, down, index(cur))
        if x < best_x:
            best, best_x = [list(r) for r in cur], x
    return best


def _isotonic(target: list[float], offset: list[float]) -> list[float]:
    """Closest x (least squares) to target with x[i] - x[i-1] >= offset[i] - offset[i-1]: pool adjacent violators."""
    vals = [t - o for t, o in zip(target, offset)]
    blocks: list[list[float]] = []  # [mean, count]
    for v in vals:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks[-1]
            blocks[-1] = [(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]
    out: list[float] = []
    for m, c in blocks:
        out.extend([m] * int(c))
    return [v + o for v, o in zip(out, offset)]


def _place_x(ranks: list[list[str]], width: dict[str, float], anchor: dict[str, float], up, down) -> dict[str, float]:
    """Centre x per node; an edge attaches at centre + anchor (label dummies: near their left end)."""
    x: dict[str, float] = {}
    offsets: list[list[float]] = []
    for rank in ranks:
        acc, offs = 0.0, []
        for i, n in enumerate(rank):
            if i:
                acc += (width[rank[i - 1]] + width[n]) / 2 + NODE_GAP
            offs.append(acc)
        offsets.append(offs)
        for n, o in zip(rank, offs):
            x[n] = o - acc / 2
    for sweep in range(24):
        seq = range(len(ranks)) if sweep % 2 == 0 else range(len(ranks) - 1, -1, -1)
        nbrs = up if sweep % 2 == 0 else down
        for k in seq:
            target = []
            for n in ranks[k]:
                ps = [x[p] + anchor[p] for p in nbrs[n]] or [x[p] + anchor[p] for p in (down if nbrs is up else up)[n]]
                target.append(sum(ps) / len(ps) - anchor[n] if ps else x[n])
            for n, v in zip(ranks[k], _isotonic(target, offsets[k])):
                x[n] = v
    return x


def layered_layout(
    nodes: Sequence[str],
    sizes: Mapping[str, tuple[float, float]],
    edges: Sequence[tuple[str, str]],
    labels: Sequence[tuple[float, float]] | None = None,
    roots: Sequence[str] = (),
    margin: float = 16.0,
) -> Layout:
    """Lay out `nodes`; `labels[i]` is the (width, height) of edge i's label ((0, 0): none)."""
    labels = list(labels or [(0.0, 0.0)] * len(edges))
    back = _break_cycles(nodes, edges, roots)
    dag_edges = [(b, a) if i in back else (a, b) for i, (a, b) in enumerate(edges) if a != b]
    layer = _layers(nodes, dag_edges)
    rank = {n: 2 * layer[n] for n in nodes}
    width = {n: float(sizes[n][0]) + (2 * (LOOP_OUT + 8) if any(a == b == n for a, b in edges) else 0.0) for n in nodes}
    height = {n: float(sizes[n][1]) for n in nodes}
    up: dict[str, list[str]] = {n: [] for n in nodes}
    down: dict[str, list[str]] = {n: [] for n in nodes}
    chains: dict[int, list[str]] = {}
    label_dummy: dict[int, str] = {}
    for i, (a, b) in enumerate(edges):
        if a == b:
            continue
        top, bottom = (b, a) if i in back else (a, b)
        chain = [top]
        for r in range(rank[top] + 1, rank[bottom]):
            d = f"\x00{i}:{r}"
            rank[d] = r
            lw, lh = labels[i]
            is_label = lw > 0 and r == (rank[bottom] - 1 if i in back else rank[top] + 1)
            width[d] = lw + 10 if is_label else 8.0
            height[d] = lh if is_label else 0.0
            if is_label:
                label_dummy[i] = d
            up[d], down[d] = [], []
            chain.append(d)
        chain.append(bottom)
        for u, v in zip(chain, chain[1:]):
            down[u].append(v)
            up[v].append(u)
        chains[i] = chain if i not in back else chain[::-1]
    n_ranks = max(rank.values()) + 1
    ranks: list[list[str]] = [[] for _ in range(n_ranks)]
    seen: set[str] = set()
    for n in [*roots, *nodes]:  # initial order: breadth-first from the roots, then input order
        queue = [n]
        while queue:
            v = queue.pop(0)
            if v in seen:
                continue
            seen.add(v)
            ranks[rank[v]].append(v)
            queue.extend(down[v])
    ranks = _order(ranks, up, down)
    anchor = {n: (-(width[n] / 2 - 4) if n in label_dummy.values() else 0.0) for n in rank}
    x = _place_x(ranks, width, anchor, up, down)
    y: dict[str, float] = {}
    y_top = margin
    for row in ranks:
        h = max((height[n] for n in row), default=0.0)
        for n in row:
            y[n] = y_top + h / 2
        y_top += h + RANK_GAP
    left = min(x[n] - width[n] / 2 for n in x)
    boxes = {n: Box(_r(x[n] - left + margin), _r(y[n]), float(sizes[n][0]), float(sizes[n][1])) for n in nodes}
    right = max(x[n] - left + margin + width[n] / 2 for n in x) + margin
    ports = _ports(edges, back, chains, boxes, {d: x[d] - left + margin + anchor[d] for d in x})
    routes = []
    for i, (a, b) in enumerate(edges):
        A = boxes[a]
        if a == b:
            p0, p1 = (A.x + A.w / 2, A.y - A.h / 4), (A.x + A.w / 2, A.y + A.h / 4)
            mid = (A.x + A.w / 2 + LOOP_OUT, A.y)
            routes.append(Route(a, b, (p0, mid, p1), (_r(mid[0] + 6), _r(mid[1] + 4)), False, True))
            continue
        mids = [(x[d] - left + margin + anchor[d], y[d]) for d in chains[i][1:-1]]
        pts = tuple((_r(px), _r(py)) for px, py in [ports[(i, a)], *mids, ports[(i, b)]])
        at = None
        if i in label_dummy:
            d = label_dummy[i]
            at = (_r(x[d] - left + margin - width[d] / 2 + 10), _r(y[d] + 4))
        routes.append(Route(a, b, pts, at, i in back, False))
    return Layout(boxes, tuple(routes), _r(right), _r(y_top - RANK_GAP + margin))


def _ports(edges, back, chains, boxes, dx) -> dict[tuple[int, str], tuple[float, float]]:
    """Where each edge meets each of its two nodes: spread along the top or bottom side, ordered by the x
    of the edge's neighbouring point so that edges leaving one side do not cross there."""
    sides: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for i, (a, b) in enumerate(edges):
        if a == b:
            continue
        chain = chains[i]
        # forward: leaves a's bottom, enters b's top; back edges the other way round
        for node, side, nxt in (
            (a, "top" if i in back else "bottom", chain[1]),
            (b, "bottom" if i in back else "top", chain[-2]),
        ):
            sides.setdefault((node, side), []).append((dx.get(nxt, boxes[nxt].x if nxt in boxes else 0.0), i))
    out: dict[tuple[int, str], tuple[float, float]] = {}
    for (node, side), items in sides.items():
        box = boxes[node]
        y = box.y + box.h / 2 if side == "bottom" else box.y - box.h / 2
        items.sort()
        k = len(items)
        span = min(box.w * 0.7, 24.0 * (k - 1))
        for j, (_, i) in enumerate(items):
            out[(i, node)] = (box.x - span / 2 + (span * j / (k - 1) if k > 1 else 0.0), y)
    return out
