"""RewardBox: a reward name + rendered arguments -> float or dict (the runtime's `RewardScorer`).

Input: built-in names from `graphrl.spec.builtins.BUILTIN_REWARDS` or `module:function`; arguments;
a judge callback for rewards that ask a model. Output: the reward value.

`math_equal` returns {score, acc, pred, gt}: 1.0 when the last \\boxed{} equals the label after
normalisation, else (with a judge model) the judge's verdict; `judge` parses a last-line
`VERDICT: True/False` (anything else: False).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

from ..runtime.parsers import last_boxed
from ..runtime.services import JudgeFn
from ..spec.imports import ImportProblem, resolve_callable
from . import text
from .math import math_equivalent, normalize_math

JUDGE_PROMPT = (
    "Decide whether the response's final answer is equivalent to the reference answer.\n"
    "Question: {question}\nResponse: {prediction}\nReference answer: {label}\n"
    "Think briefly, then end with one line exactly 'VERDICT: True' or 'VERDICT: False'.")
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(true|false)", re.I)


def parse_verdict(reply: str, default: bool = False) -> bool:
    found = _VERDICT.findall(reply)
    return found[-1].lower() == "true" if found else default


class RewardBox:
    def __init__(self, search: list[Path] | None = None):
        self._search = list(search or [])

    async def score(self, fn: str, args: dict[str, Any], *, judge_model: str | None, judge: JudgeFn) -> Any:
        if fn in ("exact_match", "f1", "sub_em"):
            return getattr(text, fn)(**args)
        if fn == "math_equal":
            return await self._math(args, judge_model, judge)
        if fn == "judge":
            return float(await self._ask(judge, judge_model, args))
        ref = resolve_callable(fn, self._search)
        if isinstance(ref, ImportProblem):
            raise ValueError(ref.message)
        value = await ref(**args) if inspect.iscoroutinefunction(ref) else await asyncio.to_thread(ref, **args)
        return value

    async def _ask(self, judge: JudgeFn, model: str | None, args: dict[str, Any]) -> bool:
        if model is None:
            return False
        prompt = JUDGE_PROMPT.format(question=args.get("question", ""), prediction=args.get("prediction", ""),
                                     label=args.get("label", ""))
        if args.get("instructions"):
            prompt = f"{args['instructions']}\n\n{prompt}"
        reply = await judge(model, [{"role": "user", "content": prompt}], 512)
        return parse_verdict(reply)

    async def _math(self, args: dict[str, Any], model: str | None, judge: JudgeFn) -> dict[str, Any]:
        prediction, label = str(args["prediction"]), str(args["label"])
        boxed = last_boxed(prediction)
        pred = normalize_math(boxed if boxed is not None else prediction)
        acc = bool(pred) and math_equivalent(pred, label)
        if not acc and model is not None and pred:
            acc = await self._ask(judge, model, {**args, "prediction": boxed if boxed is not None else prediction})
        return {"score": float(acc), "acc": float(acc), "pred": pred, "gt": normalize_math(label)}
