"""A `foreach` node's items: the value of `over` as a list, or a text cut into token chunks.

Input: the executor's services, the render context (the state before the node), the node.
Output: the items, at most `foreach.max`. A text without `chunk_tokens` is a located RenderError
(it would run once per character).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..spec.common import POLICY
from ..spec.nodes import LLMNode
from .rollout import StepServices
from .scope import RenderError


async def foreach_items(ex: StepServices, ctx: dict[str, Any], nid: str, node: Any) -> list[Any]:
    fe = node.foreach
    value = ex.render.expr(("nodes", nid, "foreach", "over"), fe.over, ctx)
    if fe.chunk_tokens:
        model = node.llm if isinstance(node, LLMNode) and not node.dynamic_model else POLICY
        renderer = ex.renderers.for_model(model)
        text = "" if value is None else str(value)
        # Tokenising a long document is CPU work: keep it off the event loop.
        ids = await asyncio.to_thread(renderer.encode, text)
        step = fe.chunk_tokens
        items = [renderer.decode(ids[i : i + step]) for i in range(0, len(ids), step)]
    elif isinstance(value, str):
        raise RenderError(
            ex.plan.span("nodes", nid, "foreach", "over"),
            f"foreach over a text ({len(value)} characters) would run once per character: "
            "add chunk_tokens: N to split it into N-token chunks, or iterate a list",
        )
    else:
        items = list(value or [])
    return items[: fe.max] if fe.max else items
