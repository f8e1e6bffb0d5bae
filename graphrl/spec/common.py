"""What every part of the graph language shares: the frozen base model, the names with a fixed
meaning, chat messages, output parsers, edges.

Input/Output: pydantic model classes (no I/O). Invariants: every model forbids unknown keys (E002)
and is frozen.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

POLICY = "policy"  # the trained model, reached through slime's router
END = "end"  # terminal target: the rollout finishes normally
ABORT = "abort"  # terminal target: the rollout ends with status ABORTED
TERMINALS = (END, ABORT)
ROLES = ("system", "user", "assistant", "tool")


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Message(_Base):
    """One chat message as `{role: template}`, or `messages: template` yielding a list of messages."""

    system: str | None = None
    user: str | None = None
    assistant: str | None = None
    tool: str | None = None
    messages: str | None = Field(
        None, description="template whose value is a list of {role, content} (or a string: one user message)"
    )

    @model_validator(mode="after")
    def _one_role(self) -> Message:
        set_ = [k for k in (*ROLES, "messages") if getattr(self, k) is not None]
        if len(set_) != 1:
            raise ValueError(f"a message has exactly one role key ({', '.join(ROLES)}), got {set_ or 'none'}")
        return self

    @cached_property
    def role(self) -> str:
        """The one role key given (or "messages"); found once, the model being frozen."""
        return next(k for k in (*ROLES, "messages") if getattr(self, k) is not None)

    @property
    def content(self) -> str:
        return getattr(self, self.role)


class Parse(_Base):
    """How an llm node's text becomes fields. All given parsers must succeed, else `fallback`, else `default`."""

    strip_think: bool = Field(False, description="drop everything up to the last </think>")
    strip_markdown: bool = Field(False, description="remove ** and __ emphasis markers")
    boxed: str | None = Field(None, description="field <- content of the last \\boxed{...} (nested braces)")
    tags: list[str] | None = Field(None, description="field per tag <- content of its last <tag>...</tag>")
    fields: list[str] | None = Field(None, description="'Key: value' blocks; field names are snake_cased keys")
    regex: dict[str, str] | None = Field(None, description="field <- group 1 (or the match) of the last match")
    json_: str | None = Field(None, alias="json", description="field <- the JSON object in the text")
    tool_calls: str | None = Field(
        None, description="field <- list of {name, arguments} from <tool_call>{json}</tool_call>"
    )
    code: str | None = Field(None, description="field <- the first fenced code block")
    call: str | None = Field(
        None, description="field <- {func, args} of a Python-call-like line (parsed with ast, never executed)"
    )
    function: str | None = Field(None, description="module:function(text) -> dict | None, a custom parser")
    fallback: Parse | None = None
    default: dict[str, Any] | None = Field(None, description="values for fields no parser produced")

    @cached_property
    def declared_fields(self) -> tuple[str, ...] | None:
        """`produced_fields()` in name order, computed once (the model is frozen): the fields every
        run of this parser starts from."""
        got = self.produced_fields()
        return None if got is None else tuple(sorted(got))

    def produced_fields(self) -> set[str] | None:
        """Fields this parser (and its fallbacks) can produce; None when a custom function makes them unknown."""
        out: set[str] = set()
        if self.function:
            return None
        for name in (self.boxed, self.json_, self.tool_calls, self.code, self.call):
            if name:
                out.add(name)
        out.update(self.tags or ())
        out.update(snake(f) for f in self.fields or ())
        out.update(self.regex or ())
        out.update(self.default or ())
        if self.fallback is not None:
            more = self.fallback.produced_fields()
            if more is None:
                return None
            out |= more
        return out


def snake(name: str) -> str:
    """'Sub-Goal' -> 'sub_goal', 'Tool Name' -> 'tool_name'."""
    out = "".join(c.lower() if c.isalnum() else "_" for c in name.strip())
    while "__" in out:
        out = out.replace("__", "_")
    return out.strip("_")


class NodeReward(_Base):
    """A reward per visit of an llm node (each item of a foreach too): scored right after the visit, with
    `output` bound; the sample holding that visit's tokens trains on it (slime: each sample its own reward)."""

    fn: str = Field(description="built-in reward name or module:function")
    args: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments (templates; `output` is the visit's result)"
    )
    key: str | None = Field(None, description="for dict results: the key the sample trains on (default: score)")


class Branch(_Base):
    """One outgoing edge: `goto` a node (or end/abort) `when` the expression is true (no `when`: default)."""

    when: str | None = Field(None, description="expression")
    goto: str


Parse.model_rebuild()
