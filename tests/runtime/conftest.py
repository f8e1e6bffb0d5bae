"""Shared helpers for runtime tests: the real Qwen tokenizer, canned engine replies, tmp graphs.

`kit` (function-scoped, bound to tmp_path) builds plans from YAML text, scripted engines whose
replies are texts encoded with the real tokenizer plus `<|im_end|>`, executors and rollouts.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted, ScriptedEngineForTests
from graphrl.models.tokenizer import QWEN_TOKEN_IDS, qwen_tokenizer
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.executor import Executor, RolloutInput, RolloutResult
from graphrl.runtime.services import StaticEndpoints
from graphrl.tools.registry import ToolBox

IM_END = QWEN_TOKEN_IDS["<|im_end|>"]
LOGPROB = -0.25


@pytest.fixture(scope="session")
def tok():
    return qwen_tokenizer()


@pytest.fixture(scope="session")
def renderer(tok) -> ChatRenderer:
    return ChatRenderer(tok)


class Kit:
    def __init__(self, tmp_path: Path, tok: Any, renderer: ChatRenderer):
        self.dir = tmp_path
        self.tok = tok
        self.r = renderer

    # -- replies --------------------------------------------------------------------------------
    def ids(self, text: str, *, stop: bool = True) -> tuple[int, ...]:
        return tuple(self.r.encode(text)) + ((IM_END,) if stop else ())

    def reply(self, text: str, *, finish: str | None = None, logprob: float = LOGPROB) -> Scripted:
        """A reply as the engine would sample it: the text's ids then <|im_end|> (unless cut/aborted)."""
        ids = self.ids(text, stop=finish is None)
        reason = None
        if finish == "length":
            reason = FinishReason("length", matched=len(ids))
        elif finish == "abort":
            reason = FinishReason("abort", message="aborted for the test")
        elif finish is None:
            reason = FinishReason("stop", matched=IM_END)
        return Scripted(output_ids=ids, logprobs=(logprob,) * len(ids), finish_reason=reason)

    def engine(self, script: Any, *, delay_s: float = 0.0) -> ScriptedEngineForTests:
        """A scripted engine: a list of replies (texts or Scripted) in call order, or a callable."""
        if isinstance(script, (list, tuple)):
            script = [self.reply(s) if isinstance(s, str) else s for s in script]
        elif callable(script):
            fn = script
            script = lambda ids, params, i: self._as_item(fn(self.r.decode(ids), i))
        return ScriptedEngineForTests(script, tokenizer=self.tok, default_logprob=LOGPROB, delay_s=delay_s)

    def _as_item(self, x: Any) -> Any:
        return self.reply(x) if isinstance(x, str) else x

    def by_prompt(self, rules: Mapping[str, Any], default: Any = None) -> ScriptedEngineForTests:
        """Reply by the first rule whose key occurs in the decoded prompt (values: text or fn(prompt, i))."""

        def pick(prompt: str, i: int) -> Any:
            for key, value in rules.items():
                if key in prompt:
                    return value(prompt, i) if callable(value) else value
            if default is None:
                raise AssertionError(f"no canned reply for prompt ending {prompt[-200:]!r}")
            return default(prompt, i) if callable(default) else default

        return self.engine(pick)

    # -- graphs ---------------------------------------------------------------------------------
    def write(self, name: str, text: str) -> Path:
        path = self.dir / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    def plan(self, yaml_text: str, name: str = "g.yaml"):
        path = self.write(name, yaml_text)
        plan, diags = plan_from_path(path)
        assert plan is not None, "\n".join(str(d) for d in diags)
        return plan

    def executor(
        self, plan, engines: Mapping[str, Any], *, tools=None, rewards=None, sampling: Mapping[str, Any] | None = None
    ) -> Executor:
        eps = StaticEndpoints(engines, self.r)
        return Executor(
            plan,
            eps,
            tools=tools or ToolBox([self.dir]),
            rewards=rewards or RewardBox([self.dir]),
            sampling=sampling or {"temperature": 1.0},
        )

    def run(self, executor: Executor, row: Mapping[str, Any], rollout_id: int | str = 0, **kw) -> RolloutResult:
        return asyncio.run(executor.run(RolloutInput(row=row, rollout_id=rollout_id, **kw)))

    def rollout(self, yaml_text: str, engines: Mapping[str, Any] | Callable, row: Mapping[str, Any], **kw):
        plan = self.plan(yaml_text)
        ex = self.executor(plan, engines, **kw)
        return self.run(ex, row)

    # -- inspection ------------------------------------------------------------------------------
    def response_text(self, sample) -> str:
        return self.r.decode(sample.response_ids)


@pytest.fixture
def kit(tmp_path, tok, renderer) -> Kit:
    return Kit(tmp_path, tok, renderer)
