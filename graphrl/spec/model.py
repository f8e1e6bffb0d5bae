"""The graph language as frozen pydantic models (the schema of a graph YAML file).

Input: a plain dict (already desugared by `graphrl.spec.desugar`).
Output: a `GraphSpec` tree of frozen models; `graph_json_schema()` gives the JSON Schema for editors.

Invariants: every model forbids unknown keys (E002) and is frozen; node kinds are a closed union
chosen by key (`llm`, `tool`, `switch`, else an update-only node); strings that hold Jinja are
documented as *template* (rendered, `{{ }}`) or *expression* (bare Jinja expression: `when`,
`switch`, `over`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .constrain import Constrain

POLICY = "policy"  # the trained model, reached through slime's router
END = "end"  # terminal target: the rollout finishes normally
ABORT = "abort"  # terminal target: the rollout ends with status ABORTED
TERMINALS = (END, ABORT)
ROLES = ("system", "user", "assistant", "tool")


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------- models, inputs, state, threads


class Price(_Base):
    """Cost accounting, in currency units per million tokens."""

    input: float = Field(0.0, ge=0)
    output: float = Field(0.0, ge=0)


class Serve(_Base):
    """Ask slime to serve this frozen model (generated --sglang-config entry)."""

    model_path: str
    num_gpus: int = Field(1, ge=1)
    num_gpus_per_engine: int = Field(1, ge=1)


class ModelDecl(_Base):
    """A named model endpoint. `policy` is the trained model; every other name is frozen."""

    url: str | None = Field(None, description="SGLang native endpoint of a frozen model, e.g. http://127.0.0.1:30001")
    serve: Serve | None = Field(None, description="let slime serve this frozen model (--sglang-config)")
    tokenizer: str | None = Field(None, description="tokenizer of this model if it differs from the policy's")
    context_length: int | None = Field(None, ge=1, description="maximum prompt + output tokens")
    price: Price | None = None
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = None
    max_concurrency: int | None = Field(None, ge=1, description="in-flight requests to this endpoint")


class InputDecl(_Base):
    """A variable read from each data row. Shorthand: `question: prompt`."""

    from_: str = Field(alias="from", description="expression over the row: prompt, label, metadata.x")
    default: Any = None
    required: bool = True


class StateVar(_Base):
    """Rollout state. Shorthand: `memory: "No previous memory"` (a default, overwrite)."""

    default: Any = None
    merge: Literal["overwrite", "append", "keyed"] = Field(
        "overwrite", description="overwrite; append to a list; keyed: merge {key: value} into an ordered dict")
    max_items: int | None = Field(None, ge=1, description="append/keyed: keep only the last N items")
    max_chars: int | None = Field(None, ge=1, description="cut each written string to N characters")
    cut: Literal["middle", "start", "end"] = Field("middle", description="where over-long strings are cut")


class Message(_Base):
    """One chat message as `{role: template}`, or `messages: template` yielding a list of messages."""

    system: str | None = None
    user: str | None = None
    assistant: str | None = None
    tool: str | None = None
    messages: str | None = Field(None, description="template whose value is a list of {role, content} (or a string: one user message)")

    @model_validator(mode="after")
    def _one_role(self) -> "Message":
        set_ = [k for k in (*ROLES, "messages") if getattr(self, k) is not None]
        if len(set_) != 1:
            raise ValueError(f"a message has exactly one role key ({', '.join(ROLES)}), got {set_ or 'none'}")
        return self

    @property
    def role(self) -> str:
        return next(k for k in (*ROLES, "messages") if getattr(self, k) is not None)

    @property
    def content(self) -> str:
        return getattr(self, self.role)


class Thread(_Base):
    """An append-only conversation: its opening messages and optional tool schemas."""

    prompt: list[Message] = Field(min_length=1)
    tools: str | None = Field(None, description="template whose value is a list of tool JSON schemas for the chat template")
    on_drift: Literal["new_sample", "fail"] = Field(
        "fail", description="what to do when the chat template is not append-only for a transition")


# ---------------------------------------------------------------- parsers


class Parse(_Base):
    """How an llm node's text becomes fields. All given parsers must succeed, else `fallback`, else `default`."""

    strip_think: bool = Field(False, description="drop everything up to the last </think>")
    strip_markdown: bool = Field(False, description="remove ** and __ emphasis markers")
    boxed: str | None = Field(None, description="field <- content of the last \\boxed{...} (nested braces)")
    tags: list[str] | None = Field(None, description="field per tag <- content of its last <tag>...</tag>")
    fields: list[str] | None = Field(None, description="'Key: value' blocks; field names are snake_cased keys")
    regex: dict[str, str] | None = Field(None, description="field <- group 1 (or the match) of the last match")
    json_: str | None = Field(None, alias="json", description="field <- the JSON object in the text")
    tool_calls: str | None = Field(None, description="field <- list of {name, arguments} from <tool_call>{json}</tool_call>")
    code: str | None = Field(None, description="field <- the first fenced code block")
    call: str | None = Field(None, description="field <- {func, args} of a Python-call-like line (parsed with ast, never executed)")
    function: str | None = Field(None, description="module:function(text) -> dict | None, a custom parser")
    fallback: "Parse | None" = None
    default: dict[str, Any] | None = Field(None, description="values for fields no parser produced")

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


# ---------------------------------------------------------------- nodes


class Branch(_Base):
    """One outgoing edge: `goto` a node (or end/abort) `when` the expression is true (no `when`: default)."""

    when: str | None = Field(None, description="expression")
    goto: str


class AppendTo(_Base):
    """Append this node's result to a thread as a message (masked, never trained). Shorthand: `append_to: main`."""

    thread: str
    role: Literal["tool", "user", "system"] = "tool"
    content: str = "{{ output }}"


class Foreach(_Base):
    """Run the node once per item (sequentially, state updated between items), then follow `next`."""

    over: str = Field(description="expression: a list, or a string when chunk_tokens is set")
    as_: str = Field("item", alias="as", description="name of the loop variable")
    chunk_tokens: int | None = Field(None, ge=1, description="split the string into chunks of N tokens")
    max: int | None = Field(None, ge=1, description="at most N items (extra items are dropped)")


class _NodeCommon(_Base):
    description: str | None = None
    update: dict[str, Any] = Field(default_factory=dict, description="state writes: name -> template")
    max_visits: int | None = Field(None, ge=1, description="bound on visits to this node in one rollout")
    token_budget: int | None = Field(None, ge=1, description="do not enter once the rollout's policy tokens reach N")
    on_limit: str | None = Field(None, description="where to go instead when max_visits or token_budget is hit (default: end)")
    append_to: AppendTo | None = None
    foreach: Foreach | None = None


class _Flow(_NodeCommon):
    next: list[Branch] | None = Field(None, description="node id, or a list of {when, goto} ending with a default")
    on_error: str | None = Field(None, description="where to go when this node fails (engine error, render error); "
                                 "its result then has ok: false and error. Without it a failure ends the rollout")


class LLMNode(_Flow):
    kind: Literal["llm"] = "llm"
    llm: str = Field(description="model name, or a template choosing one per call")
    prompt: list[Message] | None = Field(None, description="messages (fresh prompt), or messages appended to `thread`")
    thread: str | None = Field(None, description="continue this append-only conversation")
    train: bool | None = Field(None, description="loss_mask 1 on generated tokens (default: true on policy)")
    sample: Literal["call", "thread", "none"] | None = Field(
        None, description="training sample: own sample per call, the thread's sample, or none")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = None
    stop: list[str] | None = None
    constrain: Constrain | None = Field(None, description="structured output: regex, json_schema or ebnf "
                                        "(SGLang sampling params; see docs/graph-language.md)")
    parse: Parse | None = None

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


class ToolNode(_Flow):
    kind: Literal["tool"] = "tool"
    tool: str = Field(description="built-in tool name or module:function")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments (templates)")
    timeout: float = Field(30.0, gt=0, description="seconds")
    max_chars: int | None = Field(4000, ge=1, description="observation truncation (middle cut)")


class SwitchNode(_NodeCommon):
    kind: Literal["switch"] = "switch"
    switch: str = Field(description="expression whose value picks a case")
    cases: dict[str, str] = Field(min_length=1)
    default: str | None = None

    @field_validator("cases", mode="before")
    @classmethod
    def _str_keys(cls, v: Any) -> Any:
        return {str(k).lower() if isinstance(k, bool) else str(k): t for k, t in v.items()} if isinstance(v, dict) else v


class UpdateNode(_Flow):
    kind: Literal["update"] = "update"


Node = LLMNode | ToolNode | SwitchNode | UpdateNode
NODE_KINDS: dict[str, type[_Base]] = {"llm": LLMNode, "tool": ToolNode, "switch": SwitchNode, "update": UpdateNode}


# ---------------------------------------------------------------- reward, limits, slime, graph


class GroupReward(_Base):
    """Group-level post-processing over the rollouts of one prompt (e.g. ToolOrchestra's preference)."""

    fn: str = Field(description="built-in (preference) or module:function")
    args: dict[str, Any] = Field(default_factory=dict)


class Reward(_Base):
    fn: str = Field(description="built-in reward name or module:function")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments (templates)")
    judge: str | None = Field(None, description="model used as a judge by rewards that take one")
    key: str | None = Field(None, description="for dict rewards: the key slime trains on (--reward-key)")
    credit: Literal["even", "broadcast"] = Field(
        "even", description="split across a rollout's samples (reward / n) or give each the full reward")
    group: GroupReward | None = None


class Limits(_Base):
    max_steps: int | None = Field(None, ge=1, description="node visits per rollout; reaching it ends the rollout truncated")
    timeout_s: float | None = Field(None, gt=0, description="wall-clock limit per rollout")
    max_tokens: int | None = Field(None, ge=1, description="default max new tokens per llm call")


class SlimeSettings(_Base):
    """slime options that change how the graph must be compiled (checked against fan-out)."""

    partial_rollout: bool = False
    group_rm: bool = False
    dynamic_sampling_filter: str | None = None
    extra_args: list[str] = Field(default_factory=list)


class GraphSpec(_Base):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    description: str | None = None
    version: Literal[1] = 1
    templates: str | None = Field(None, description="directory of .j2 files, relative to this file")
    models: dict[str, ModelDecl] = Field(default_factory=dict)
    inputs: dict[str, InputDecl] = Field(default_factory=dict)
    state: dict[str, StateVar] = Field(default_factory=dict)
    threads: dict[str, Thread] = Field(default_factory=dict)
    start: str | None = None
    nodes: dict[str, Any] = Field(min_length=1, description="node id -> node")
    reward: Reward | None = None
    limits: Limits = Field(default_factory=Limits)
    slime: SlimeSettings = Field(default_factory=SlimeSettings)


Parse.model_rebuild()
