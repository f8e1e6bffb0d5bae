"""ReTool's reward (slime's examples/retool `reward_func`), in graphrl's terms.

+1 when the last `Answer: \\boxed{...}` of the response equals the label after math normalisation,
else -1 + 0.05 x (interpreter calls - 2), capped at -0.6: -1.1 with no call, -0.7 with eight (the
recipe's nudge towards using the tool). Returns {score, acc, pred, tool_calls}; the graph trains on `score`.
"""

from __future__ import annotations

import re

from graphrl.rewards.math import math_equivalent

_ANSWER = re.compile(r"Answer:\s*\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}", re.S)


def retool_score(response: str, label: str, tool_calls: int = 0) -> dict:
    found = _ANSWER.findall(response or "")
    pred = found[-1].strip() if found else ""
    correct = bool(pred) and math_equivalent(pred, str(label))
    score = 1.0 if correct else min(-0.6, -1.0 + (int(tool_calls) - 2) / 2 * 0.1)
    return {"score": score, "acc": float(correct), "pred": pred, "tool_calls": int(tool_calls)}
