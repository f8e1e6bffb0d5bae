"""A tau-bench-shaped retail environment for graphs/tau_retail.yaml: a small order database per task.

One instance per rollout (graphrl's `environment:`): made from the task in the data row, reset() gives
the agent's tool schemas and the customer's instruction, step(action) runs one tool call on the
database, reward() is 1.0 when the orders end in the task's goal state (tau-bench scores the final
database against the one the reference actions produce), else 0.0.

Actions are the agent's tool calls, `{"name": ..., "arguments": {...}}` (a dict or its JSON text).
"""

from __future__ import annotations

import copy
import json
from typing import Any

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "The status, items and total of an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "e.g. #W1001"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_pending_order",
            "description": "Cancel an order that is still pending. Only pending orders can be cancelled.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
                },
                "required": ["order_id", "reason"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "return_delivered_order",
            "description": "Start the return of a delivered order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
]


class RetailEnv:
    def __init__(self, task: dict[str, Any]):
        if not isinstance(task, dict) or "orders" not in task or "goal" not in task:
            raise ValueError("task needs 'orders' (id -> order) and 'goal' (id -> final status)")
        self.task = task
        self.orders: dict[str, dict[str, Any]] = copy.deepcopy(task["orders"])
        self.actions: list[str] = []

    def reset(self) -> dict[str, Any]:
        return {"instruction": self.task["instruction"], "tools": TOOLS, "customer": self.task.get("name", "")}

    def step(self, action: Any) -> dict[str, Any]:
        try:
            call = json.loads(action) if isinstance(action, str) else dict(action)
            name, args = call["name"], dict(call.get("arguments") or {})
        except (ValueError, TypeError, KeyError) as exc:
            return {"text": f"Error: not a tool call ({type(exc).__name__})", "ok": False}
        self.actions.append(name)
        order = self.orders.get(str(args.get("order_id", "")))
        if name not in {t["function"]["name"] for t in TOOLS}:
            return {"text": f"Error: unknown tool {name}", "ok": False}
        if order is None:
            return {"text": f"Error: order {args.get('order_id')!r} not found", "ok": False}
        if name == "get_order_details":
            return {"text": json.dumps(order, sort_keys=True)}
        if name == "cancel_pending_order":
            if order["status"] != "pending":
                return {"text": f"Error: order is {order['status']}, only pending orders can be cancelled", "ok": False}
            order["status"] = "cancelled"
            return {"text": json.dumps(order, sort_keys=True)}
        if order["status"] != "delivered":
            return {"text": f"Error: order is {order['status']}, only delivered orders can be returned", "ok": False}
        order["status"] = "return requested"
        return {"text": json.dumps(order, sort_keys=True)}

    def reward(self) -> float:
        goal = self.task["goal"]
        return float(all(self.orders[oid]["status"] == status for oid, status in goal.items()))
