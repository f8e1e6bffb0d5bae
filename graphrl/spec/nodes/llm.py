"""The `llm` node kind: one call of a model (the trained policy, or a frozen one).

YAML: `llm: MODEL` plus a fresh `prompt:` or a `thread:` to continue; `train`, `sample`, sampling
overrides, `stop`, `parse`. Runtime: `graphrl.runtime.handlers.llm`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ..common import POLICY, Message, NodeReward, Parse
from ..constrain import Constrain
from ..walk import walk_strings
from .base import FlowNode, NodeBase, Path


class LLMNode(FlowNode):
    selector: ClassVar[str | None] = "llm"
    shape: ClassVar[str] = "rounded"

    kind: Literal["llm"] = "llm"
    llm: str = Field(description="model name, or a template choosing one per call")
    prompt: list[Message] | None = Field(None, description="messages (fresh prompt), or messages appended to `thread`")
    thread: str | None = Field(None, description="continue this append-only conversation")
    train: bool | None = Field(None, description="loss_mask 1 on generated tokens (default: true on policy)")
    sample: Literal["call", "thread", "none"] | None = Field(
        None, description="training sample: own sample per call, the thread's sample, or none"
    )
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = None
    stop: list[str] | None = None
    constrain: Constrain | None = Field(
        None,
        description="structured output: regex, json_schema or ebnf "
        "(SGLang sampling params; see docs/graph-language.md)",
    )
    parse: Parse | None = None
    completion: bool | None = Field(
        None,
        description="completion mode for this call: no chat template, the prompt is its messages' text "
        "as written (default: the model's `completion`)",
    )
    reward: NodeReward | None = Field(
        None,
        description="a reward per visit: its sample trains on it instead of a share of the rollout's reward "
        "(reward.node_rewards says how the two combine)",
    )
    tools: str | None = Field(
        None,
        description="template whose value is a list of tool JSON schemas, rendered into this call's "
        "prompt by the chat template (a thread's tools are `threads.NAME.tools`)",
    )

    @model_validator(mode="after")
    def _tools_fresh_prompt(self) -> LLMNode:
        if self.tools is not None and self.thread is not None:
            raise ValueError(
                f"tools: on a node that continues thread '{self.thread}' would re-render the whole "
                f"conversation: declare them once as threads.{self.thread}.tools"
            )
        return self

    @property
    def dynamic_model(self) -> bool:
        return "{" in self.llm

    @property
    def on_policy(self) -> bool:
        return self.llm == POLICY

    @property
    def trained(self) -> bool:
        """Resolved `train`: true by default on the policy, false elsewhere."""
        return self.on_policy if self.train is None else self.train

    @property
    def sample_mode(self) -> str:
        """Resolved `sample`: policy -> thread (with a thread) or call; frozen -> none."""
        if self.sample is not None:
            return self.sample
        if not self.on_policy:
            return "none"
        return "thread" if self.thread else "call"

    # ------------------------------------------------------------------ hooks
    def sites(self) -> Iterator[tuple[Path, str, str]]:
        if self.dynamic_model:
            yield ("llm",), self.llm, "template"
        for path, m in self.messages():
            yield path, m.content, "template"
        if self.tools is not None:
            yield ("tools",), self.tools, "template"
        if self.reward is not None:
            for path, text in walk_strings(self.reward.args, ("reward", "args")):
                yield path, text, "template"

    def messages(self) -> Iterator[tuple[Path, Message]]:
        for i, m in enumerate(self.prompt or ()):
            yield ("prompt", i, m.role), m

    def lines(self) -> list[str]:
        if self.sample_mode != "none":
            role = "trained" if self.trained else "masked"
        else:
            role = "frozen" if not self.on_policy else "none"
        sample = {"call": "own sample per call", "thread": f"thread {self.thread}'s sample", "none": "no sample"}
        second = {"trained": "trained", "masked": "masked", "frozen": "frozen", "none": "not trained"}[role]
        out = [f"llm · {self.llm}", second + " · " + sample[self.sample_mode]]
        if self.thread and self.sample_mode != "thread":
            out.append(f"thread {self.thread}")
        return out

    def lowered(self, *, default_max_tokens: int) -> NodeBase:
        node = super().lowered(default_max_tokens=default_max_tokens)
        update: dict[str, Any] = {
            "train": self.trained,
            "sample": self.sample_mode,
            "max_tokens": self.max_tokens or default_max_tokens,
        }
        return node.model_copy(update=update)
