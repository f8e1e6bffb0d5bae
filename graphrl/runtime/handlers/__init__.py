"""What each node kind does at run time: kind -> `Handler` (run the node, then choose the next one).

Input: the executor's services (`StepServices`), the rollout, the node and its render context.
Output: the node's result (`NodeResult`, what templates see as `output` / `<node id>`) and the id of
the next node. Every kind of `graphrl.spec.nodes.KINDS` has an entry (a test checks it).
"""

from __future__ import annotations

from . import graph, llm, parallel, switch, tool, update
from .base import Handler

HANDLERS: dict[str, Handler] = {
    "llm": llm.HANDLER,
    "tool": tool.HANDLER,
    "switch": switch.HANDLER,
    "graph": graph.HANDLER,
    "parallel": parallel.HANDLER,
    "update": update.HANDLER,
}

__all__ = ["HANDLERS", "Handler"]
