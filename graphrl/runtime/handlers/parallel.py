"""Parallel forks: run the branch nodes concurrently (`max` at a time), apply them in listed order.

Each branch is one visit of its node (its visit counted, its path entry, its `max_visits` and the
rollout's `max_steps` respected: a branch at its bound is skipped); the branches of a batch all see
the state as it was before the batch; after the batch their results are bound, their state writes,
node rewards and `append_to` applied, and their samples (and sub-graph runs) joined in listed
order. A fault in a branch is the fork's fault (its `on_error` may catch it). The fork's result is
`{branches: [the ids that ran, in order]}`; then the fork follows its own `next`.

This handler drives the executor's visit bookkeeping (`_ctx`, `_limited`, `_record`, ...), as the
executor's own foreach does, and runs each branch with the executor's handler table (`handlers`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..ledger import TrainingSample
from ..rollout import RolloutState, merge_pending
from ..scope import NodeResult
from .base import Handler


async def run_parallel(ex: Any, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any]) -> NodeResult:
    ran: list[str] = []
    width = node.max or len(node.parallel)
    todo = list(node.parallel)
    while todo:
        batch: list[tuple[str, Any, int, dict[str, Any]]] = []
        while todo and len(batch) < width:
            bid = todo.pop(0)
            bnode = ex.plan.nodes[bid]
            if ex._out_of_steps(r):
                todo = []
                break
            if ex._limited(r, bid, bnode):
                continue
            r.steps += 1
            r.visits[bid] = r.visits.get(bid, 0) + 1
            r.path.append((bid, r.visits[bid]))
            batch.append((bid, bnode, r.visits[bid], ex._ctx(r, r.visits[bid])))
        if not batch:
            break
        first = len(r.samples)
        try:
            results = await asyncio.gather(
                *(ex.handlers[b.kind].run(ex, r, bid, b, v, c) for bid, b, v, c in batch), return_exceptions=True
            )
        finally:
            _in_listed_order(r, first, batch)
        for (bid, bnode, v, c), res in zip(batch, results):
            if isinstance(res, BaseException):
                raise res
            if r.status == "aborted":
                return NodeResult(branches=ran, ok=False)
            if getattr(bnode, "reward", None) is not None:
                await ex._node_reward(r, bid, bnode, v, c, res)
            ex._record(r, bid, bnode, v, c, res)
            ran.append(bid)
        if r.abort is not None and r.abort.is_set():
            break
    return NodeResult(branches=ran, ok=True)


def _in_listed_order(r: RolloutState, first: int, batch: list[tuple[str, Any, int, dict[str, Any]]]) -> None:
    """The samples the batch made (since `first`) and its sub-graph runs, joined branch by branch."""
    made = r.samples[first:]
    del r.samples[first:]

    def owner(s: Any) -> str | None:
        return s.spans[0].node if isinstance(s, TrainingSample) and s.spans else None

    for bid, _, v, _ in batch:
        r.samples.extend(s for s in made if owner(s) == bid)
        merge_pending(r, [(bid, v)])
    ids = {bid for bid, _, _, _ in batch}
    r.samples.extend(s for s in made if owner(s) not in ids)  # e.g. a thread sample with no output yet


HANDLER = Handler(run=run_parallel)
