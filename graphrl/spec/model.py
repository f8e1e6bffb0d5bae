"""The graph language as frozen pydantic models (the schema of a graph YAML file).

Input: a plain dict (already desugared by `graphrl.spec.desugar`).
Output: a `GraphSpec` tree of frozen models; `graph_json_schema()` gives the JSON Schema for editors.

Invariants: every model forbids unknown keys (E002) and is frozen; node kinds are a closed union
defined in `graphrl.spec.nodes` (one module per kind) and chosen by key; strings that hold Jinja are
documented as *template* (rendered, `{{ }}`) or *expression* (bare Jinja expression: `when`,
`switch`, `over`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .common import (  # noqa: F401 - re-exported: the language's shared names
    ABORT,
    END,
    POLICY,
    ROLES,
    TERMINALS,
    Branch,
    Message,
    Parse,
    _Base,
    snake,
)
from .nodes import (  # noqa: F401 - re-exported: the node kinds (graphrl.spec.nodes)
    KINDS,
    NODE_KINDS,
    AnyNode,
    AppendTo,
    Foreach,
    LLMNode,
    Node,
    SwitchNode,
    ToolNode,
    UpdateNode,
)

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
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="seconds one request to this endpoint may take (default: graphrl run --engine-timeout, 900)",
    )
    chat_template: str | None = Field(
        None,
        description="a chat-template file (.jinja, .j2, .jinja2), relative to the graph file, rendered "
        "instead of the tokenizer's chat template",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="variables passed to every render of the chat template, e.g. {enable_thinking: false}"
    )
    completion: bool | None = Field(
        None,
        description="completion mode: no chat template; a prompt is its messages' text as written, "
        "tokenised as is (base models)",
    )

    @model_validator(mode="after")
    def _one_mode(self) -> ModelDecl:
        if self.completion and (self.chat_template is not None or self.chat_template_kwargs):
            raise ValueError(
                "completion: true means no chat template: remove chat_template / chat_template_kwargs, or completion"
            )
        return self


class InputDecl(_Base):
    """A variable read from each data row. Shorthand: `question: prompt`."""

    from_: str = Field(alias="from", description="expression over the row: prompt, label, metadata.x")
    default: Any = None
    required: bool = True


class StateVar(_Base):
    """Rollout state. Shorthand: `memory: "No previous memory"` (a default, overwrite)."""

    default: Any = None
    merge: Literal["overwrite", "append", "keyed"] = Field(
        "overwrite", description="overwrite; append to a list; keyed: merge {key: value} into an ordered dict"
    )
    max_items: int | None = Field(None, ge=1, description="append/keyed: keep only the last N items")
    max_chars: int | None = Field(None, ge=1, description="cut each written string to N characters")
    cut: Literal["middle", "start", "end"] = Field("middle", description="where over-long strings are cut")


class EnvironmentDecl(_Base):
    """A per-rollout stateful environment: a user class, made at the rollout's start and closed at its end."""

    class_: str = Field(
        alias="class",
        description="module:Class next to the graph; made with args, then reset() (its return value is "
        "`env` in templates), step(action) through the env_step tool, reward() through the env_reward "
        "reward, close() at the rollout's end (each optional, sync or async)",
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments (templates over inputs, constants and the row)"
    )
    timeout: float = Field(30.0, gt=0, description="seconds allowed for each of make+reset, step, reward and close")


class Summarize(_Base):
    """How a thread over its budget is summarised (`on_overflow: summarize`): one LLM call writes a
    summary of the older messages, which replaces them; the newest `keep_last` stay verbatim."""

    llm: str = Field(POLICY, description="the model that writes the summary (the policy or a declared frozen model)")
    prompt: list[Message] = Field(
        min_length=1,
        description="the summary call's messages; besides the usual names they see `dropped`, the "
        "messages being replaced (a list of {role, content})",
    )
    keep_last: int = Field(2, ge=1, description="the newest messages kept verbatim after the summary")
    role: Literal["user", "system", "assistant"] = Field(
        "user", description="role of the summary message in the thread"
    )
    content: str = Field(
        "{{ summary }}", description="template of the summary message; `summary` is the summary call's text"
    )
    max_tokens: int = Field(512, ge=1, description="max new tokens of the summary call")
    train: bool = Field(
        False,
        description="the summary call is a training sample of its own (mask 1 on its output); only with llm: policy",
    )


class Thread(_Base):
    """An append-only conversation: its opening messages and optional tool schemas."""

    prompt: list[Message] = Field(min_length=1)
    tools: str | None = Field(
        None, description="template whose value is a list of tool JSON schemas for the chat template"
    )
    max_tokens: int | None = Field(
        None,
        ge=16,
        description="token budget of the thread: before a call that would send more, the oldest messages "
        "after the opening ones are dropped (a new training sample starts from the shortened conversation)",
    )
    on_overflow: Literal["truncate", "summarize"] = Field(
        "truncate",
        description="past max_tokens: drop the oldest messages (truncate), or replace them with an LLM-written "
        "summary (summarize: see summarize:); either way a new training sample starts",
    )
    summarize: Summarize | None = Field(None, description="the summary call, for on_overflow: summarize")
    on_drift: Literal["new_sample", "fail"] = Field(
        "fail",
        description="when re-rendering the thread does not reproduce the ids already sent (a chat template "
        "that rewrites history, e.g. drops earlier <think> blocks): start a new training sample from the "
        "re-rendered conversation, or fail the rollout",
    )


# ---------------------------------------------------------------- reward, limits, graph


class GroupReward(_Base):
    """Group-level post-processing over the rollouts of one prompt (e.g. ToolOrchestra's preference)."""

    fn: str = Field(description="built-in (preference) or module:function")
    args: dict[str, Any] = Field(default_factory=dict)


class RewardTerm(_Base):
    """One term of a composite reward: a built-in or module:function reward, and its weight."""

    fn: str = Field(description="built-in reward name or module:function")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments (templates)")
    weight: float = Field(1.0, description="the term's weight in the combination")


class Reward(_Base):
    fn: str | None = Field(None, description="built-in reward name or module:function (or `terms:`)")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments (templates)")
    terms: dict[str, RewardTerm] | None = Field(
        None, description="a composite reward: name -> {fn, args, weight}; the reward is {score, <name>: value...}"
    )
    combine: Literal["sum", "max"] = Field(
        "sum", description="terms: score = sum of weight x value, or the max of them (Search-R1's format score)"
    )
    judge: str | None = Field(None, description="model used as a judge by rewards that take one")
    key: str | None = Field(None, description="for dict rewards: the key slime trains on (--reward-key)")
    credit: Literal["even", "broadcast", "discounted", "last"] = Field(
        "even",
        description="how a rollout's reward reaches its samples: even (reward / n), broadcast (each the full "
        "reward), discounted (discount ** samples after it; the last gets the reward), last (only the last "
        "sample trains; earlier ones are kept out of the loss)",
    )
    discount: float = Field(1.0, gt=0, le=1, description="credit: discounted: the factor per later sample")
    node_rewards: Literal["own", "times", "plus"] = Field(
        "own",
        description="samples of nodes with their own reward: train on it (own), on it times this rollout "
        "reward (times), or on it plus this reward (plus); samples without one get credit as usual",
    )
    group: GroupReward | None = None

    @model_validator(mode="after")
    def _fn_or_terms(self) -> Reward:
        if (self.fn is None) == (self.terms is None):
            raise ValueError("a reward has either fn: (with args:) or terms: (a composite reward), not both")
        if self.terms is not None and self.args:
            raise ValueError("args: belong to each term of a composite reward")
        if self.terms is not None and not self.terms:
            raise ValueError("terms: needs at least one term")
        return self

    def items(self) -> list[tuple[tuple, str, dict[str, Any]]]:
        """(path of its args, fn, args) of the reward, or of each term."""
        if self.terms is None:
            return [(("reward", "args"), str(self.fn), self.args)]
        return [(("reward", "terms", name, "args"), t.fn, t.args) for name, t in self.terms.items()]


class Limits(_Base):
    max_steps: int | None = Field(
        None, ge=1, description="node visits per rollout; reaching it ends the rollout truncated"
    )
    timeout_s: float | None = Field(None, gt=0, description="wall-clock limit per rollout")
    max_tokens: int | None = Field(None, ge=1, description="default max new tokens per llm call")
    max_prompt_tokens: int = Field(
        262_144,
        ge=1,
        description="a longer prompt fails its rollout before any engine "
        "call (text over 16 characters per token is refused before it is tokenised)",
    )


class GraphSpec(_Base):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    description: str | None = None
    version: Literal[1] = 1
    templates: str | None = Field(None, description="directory of .j2 files, relative to this file")
    templates_outside: bool = Field(
        False,
        description="allow prompt files outside the templates directory "
        "(by default a path or symlink leading out of it is an error)",
    )
    include: str | list[str] | None = Field(
        None,
        description="YAML files (relative to this file) whose sections (constants, models, inputs, state, "
        "threads, nodes, reward, environment, limits) merge into this graph when it is loaded",
    )
    constants: dict[str, Any] = Field(
        default_factory=dict,
        description="named values: usable by name in every "
        "template and expression, and as `$NAME` for any value (e.g. max_visits: $max_turns)",
    )
    models: dict[str, ModelDecl] = Field(default_factory=dict)
    inputs: dict[str, InputDecl] = Field(default_factory=dict)
    state: dict[str, StateVar] = Field(default_factory=dict)
    threads: dict[str, Thread] = Field(default_factory=dict)
    start: str | None = None
    nodes: dict[str, AnyNode] = Field(min_length=1, description="node id -> node (llm, tool, switch, or update-only)")
    reward: Reward | None = None
    environment: EnvironmentDecl | None = None
    limits: Limits = Field(default_factory=Limits)
