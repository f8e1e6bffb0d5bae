"""RewardBox: a reward name + rendered arguments -> float or dict (the runtime's `RewardScorer`).

Input: built-in names from `graphrl.spec.builtins.BUILTIN_REWARDS` or `module:function`; arguments;
a judge callback for rewards that ask a model. Output: the reward value.

Judges are asked only when the rule says "wrong" and a judge model is configured (reward.judge):
- `math_equal` returns {score, acc, pred, gt}: 1.0 when the last \\boxed{} equals the label after
  math normalisation (`pred` is that \\boxed{} content as written -- the whole prediction when it has
  none -- and `gt` the label as given; only the comparison normalises), else the judge's verdict (AgentFlow: a last-line `VERDICT: True/False`);
- `exact_match` / `sub_em` return 1.0 when the rule matches, else the judge's verdict on the
  extracted prediction (ToolOrchestra: a JSON reply `{"correct": true|false}`); no extracted
  prediction (e.g. no \\boxed{} with extract=boxed) is never sent to the judge;
- `judge` always asks.
Verdict parsing accepts both styles, takes the last one in the reply, and defaults to False.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

from ..runtime.environment import env_reward, with_env
from ..runtime.parsers import last_boxed
from ..runtime.services import JudgeFn
from ..spec.imports import ImportProblem, resolve_callable
from . import text
from .math import math_equivalent, normalize_math

VERDICT_PROMPT = (
    "Decide whether the response's final answer is equivalent to the reference answer.\n"
    "Question: {question}\nResponse: {prediction}\nReference answer: {label}\n"
    "Think briefly, then end with one line exactly 'VERDICT: True' or 'VERDICT: False'."
)
JSON_PROMPT = (
    "Is the predicted answer correct, given the reference answer(s)? Minor wording differences are fine; "
    "a different entity, number or date is not.\n"
    "Question: {question}\nPredicted answer: {prediction}\nReference answer(s): {label}\n"
    'Reply with JSON only: {{"correct": true}} or {{"correct": false}}.'
)
JUDGE_PROMPT = VERDICT_PROMPT  # the `judge` reward's prompt
JUDGE_MAX_TOKENS = 512
_VERDICT = re.compile(r"VERDICT\s*:\s*\**\s*(true|false)|\"?correct\"?\s*:\s*\"?(true|false)", re.I)


def parse_verdict(reply: str, default: bool = False) -> bool:
    """The last `VERDICT: True/False` or `"correct": true/false` in `reply`; `default` when none."""
    found = _VERDICT.findall(reply)
    if not found:
        return default
    verdict, correct = found[-1]
    return (verdict or correct).lower() == "true"


def _label_text(label: Any) -> str:
    return " | ".join(text.golds(label))


class RewardBox:
    def __init__(self, search: list[Path] | None = None, *, judge_max_tokens: int = JUDGE_MAX_TOKENS):
        self._search = list(search or [])
        self.judge_max_tokens = judge_max_tokens

    async def score(
        self, fn: str, args: dict[str, Any], *, judge_model: str | None, judge: JudgeFn, env: Any = None
    ) -> Any:
        """`env`: the rollout's `LiveEnvironment` (or None): `env_reward` asks it; a user reward with a
        parameter named `env` receives the user object."""
        if fn == "f1":
            return text.f1(**args)
        if fn in ("exact_match", "sub_em"):
            return await self._text(fn, args, judge_model, judge)
        if fn == "math_equal":
            return await self._math(args, judge_model, judge)
        if fn == "judge":
            return float(await self._ask(judge, judge_model, args, VERDICT_PROMPT))
        if fn == "format":
            return text.format_match(**args)
        if fn == "tool_use":
            return text.tool_use(**args)
        if fn == "value":
            return float(args["value"])
        if fn == "env_reward":
            return await env_reward(env)
        ref = resolve_callable(fn, self._search)
        if isinstance(ref, ImportProblem):
            raise ValueError(ref.message)
        args = with_env(ref, args, env)
        value = await ref(**args) if inspect.iscoroutinefunction(ref) else await asyncio.to_thread(ref, **args)
        return value

    async def _ask(self, judge: JudgeFn, model: str | None, args: dict[str, Any], template: str) -> bool:
        if model is None:
            return False
        prompt = template.format(
            question=args.get("question", ""), prediction=args.get("prediction", ""), label=args.get("label", "")
        )
        if args.get("instructions"):
            prompt = f"{args['instructions']}\n\n{prompt}"
        reply = await judge(model, [{"role": "user", "content": prompt}], self.judge_max_tokens)
        return parse_verdict(reply)

    async def _text(self, fn: str, args: dict[str, Any], model: str | None, judge: JudgeFn) -> float:
        rule = {k: v for k, v in args.items() if k != "question"}
        value = getattr(text, fn)(**rule)
        if value or model is None:
            return value
        pred = text.extract(args["prediction"], args.get("extract"), args.get("tail_chars"))
        if not pred or not pred.strip():
            return value
        ask = {"question": args.get("question", ""), "prediction": pred.strip(), "label": _label_text(args["label"])}
        return float(await self._ask(judge, model, ask, JSON_PROMPT))

    async def _math(self, args: dict[str, Any], model: str | None, judge: JudgeFn) -> dict[str, Any]:
        prediction, label = str(args["prediction"]), str(args["label"])
        boxed = last_boxed(prediction)
        answer = boxed if boxed is not None else prediction
        norm = normalize_math(answer)
        acc = bool(norm) and math_equivalent(norm, label)
        if not acc and model is not None and norm:
            acc = await self._ask(judge, model, {**args, "prediction": answer}, VERDICT_PROMPT)
        # pred/gt as written (what a person reads in a viewer); the comparison used the normalised forms
        return {"score": float(acc), "acc": float(acc), "pred": answer.strip(), "gt": label.strip()}
