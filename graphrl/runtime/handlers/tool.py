"""Tool nodes: render `args:`, call the tool (errors are data), record the call."""

from __future__ import annotations

from typing import Any

from ..ledger import CallRecord
from ..rollout import RolloutState, StepServices
from ..scope import NodeResult
from .base import Handler


async def run_tool(
    ex: StepServices, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any]
) -> NodeResult:
    args = ex.render.value(("nodes", nid, "args"), node.args, ctx)
    t0 = ex.clock()
    res = await ex.tools.call(node.tool, args, timeout=node.timeout, max_chars=node.max_chars, resources=r.resources)
    r.calls.append(
        CallRecord(
            node=nid,
            visit=visit,
            endpoint=f"tool:{node.tool}",
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=round(ex.clock() - t0, 6),
            finish_reason="stop" if res.ok else "error",
            error=res.error,
            start_s=round(t0 - r.t0, 6),
        )
    )
    out = NodeResult(res.data if isinstance(res.data, dict) else {})
    out.update(text=res.text, ok=res.ok, error=res.error)
    return out


HANDLER = Handler(run=run_tool)
