"""What every node kind shares: the common keys, and the hooks through which each kind tells the
other stages about itself (so that adding a kind is one module, see `graphrl.spec.nodes`).

Input/Output: pydantic model classes. Hooks a kind overrides (all pure, no I/O):
  selector        the YAML key that picks this kind (`llm: ...`); None: the kind of a node with none
  shape           how diagrams draw it: rounded | tool | hexagon | dashed
  sites()         its strings that hold Jinja, as (path below the node, text, "template" | "expression")
  messages()      its chat messages whose text may name a template file, as (path below the node, Message)
  edges()         its outgoing edges, as (path below the node, target, label)
  lines()         the text lines a diagram shows under its id
  lowered(...)    the node with every default the runtime would apply made explicit (for the plan)
Invariants: every model forbids unknown keys (E002) and is frozen; `kind` is the discriminator of
the plan's node union.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from ..common import END, Branch, Message, _Base

Path = tuple[Any, ...]


class AppendTo(_Base):
    """Append this node's result to a thread as a message (masked, never trained). Shorthand: `append_to: main`.

    `in_response: true`: the text goes inside the thread's current assistant response instead (no
    turn markers; the next call of the thread continues that response), as Search-R1 / ReTool lay
    out observations: policy tokens, observation tokens (mask 0), policy tokens."""

    thread: str
    role: Literal["tool", "user", "system"] = "tool"
    content: str = "{{ output }}"
    in_response: bool = Field(
        False,
        description="append inside the current assistant response (no new turn); "
        "the thread's last output must have stopped on a stop string",
    )


class Foreach(_Base):
    """Run the node once per item, then follow `next`. Items run one at a time (state updated between
    them), or `parallel` at a time: the items of a batch see the state as it was before the batch, and
    their results are applied in item order."""

    over: str = Field(description="expression: a list, or a string when chunk_tokens is set")
    as_: str = Field("item", alias="as", description="name of the loop variable")
    chunk_tokens: int | None = Field(None, ge=1, description="split the string into chunks of N tokens")
    max: int | None = Field(None, ge=1, description="at most N items (extra items are dropped)")
    parallel: int = Field(1, ge=1, description="items run at a time (1: one after another)")


class NodeBase(_Base):
    """Keys every node has: description, state writes, visit and token bounds, foreach, append_to."""

    selector: ClassVar[str | None] = None
    shape: ClassVar[str] = "rounded"

    if TYPE_CHECKING:  # each kind declares `kind: Literal[...]` (after these keys: plan JSON key order)
        kind: str
    description: str | None = None
    update: dict[str, Any] = Field(default_factory=dict, description="state writes: name -> template")
    max_visits: int | None = Field(None, ge=1, description="bound on visits to this node in one rollout")
    token_budget: int | None = Field(None, ge=1, description="do not enter once the rollout's policy tokens reach N")
    on_limit: str | None = Field(
        None, description="where to go instead when max_visits or token_budget is hit (default: end)"
    )
    append_to: AppendTo | None = None
    foreach: Foreach | None = None

    # ------------------------------------------------------------------ hooks
    def sites(self) -> Iterator[tuple[Path, str, str]]:
        """Strings of this kind's own keys that hold Jinja (the common keys are walked by the loader)."""
        return iter(())

    def messages(self) -> Iterator[tuple[Path, Message]]:
        return iter(())

    def edges(self) -> Iterator[tuple[Path, str, str]]:
        """Outgoing edges besides on_limit / on_error (which the flow adds for every kind)."""
        return iter(())

    def lines(self) -> list[str]:
        return [self.kind]

    def lowered(self, *, default_max_tokens: int) -> NodeBase:
        update: dict[str, Any] = {}
        if (self.max_visits or self.token_budget) and self.on_limit is None:
            update["on_limit"] = END
        return self.model_copy(update=update) if update else self


class FlowNode(NodeBase):
    """A node that moves on along `next` (every kind but switch), and may route failures to `on_error`."""

    next: list[Branch] | None = Field(None, description="node id, or a list of {when, goto} ending with a default")
    on_error: str | None = Field(
        None,
        description="where to go when this node fails (engine error, render error); "
        "its result then has ok: false and error. Without it a failure ends the rollout",
    )

    def edges(self) -> Iterator[tuple[Path, str, str]]:
        if self.next is None:
            yield (), END, "next"
            return
        for i, b in enumerate(self.next):
            label = f"when {b.when}" if b.when is not None else ("next" if len(self.next) == 1 else "else")
            yield ("next", i, "goto"), b.goto, label

    def lowered(self, *, default_max_tokens: int) -> NodeBase:
        node = super().lowered(default_max_tokens=default_max_tokens)
        if node.next is None:  # type: ignore[attr-defined]
            node = node.model_copy(update={"next": [Branch(goto=END)]})
        return node
