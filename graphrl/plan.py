"""The frozen execution plan (the IR): what `graphrl run` and every compile target execute.

Input: nothing of the layers above; `graphrl.compilers.lower` builds a `Plan` from a checked graph,
`load_plan` reads one from plan.json.
Output: `Plan` (a frozen pydantic model) and its canonical JSON text (`plan_json`).

Invariants:
- self-contained: template files are inlined, each listed under `templates` with its sha256 (a
  model's `chat_template` holds the template's text, not its file name);
- resolved: every default the runtime would apply (train, sample, max_tokens, edges) is explicit;
- deterministic: `plan_json` emits keys in a fixed order, so the same plan gives byte-identical text;
- located: `spans` maps each value's dotted path to file:line:col so runtime errors point at YAML;
- nested: a `graph` node's child graph is a `Plan` of its own under `subgraphs` (its spans in the
  child's file), so it is self-contained too;
- below the runtime: this module imports only `graphrl.spec` (the node and section models).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .errors import UsageProblem
from .spec.model import EnvironmentDecl, InputDecl, Limits, ModelDecl, Reward, StateVar, Thread
from .spec.nodes import PlanNode

PLAN_FORMAT = "graphrl.plan/2"  # /2: target sections under `targets` (was a fixed `slime` key)


class TemplateFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    sha256: str
    lines: int


class Training(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    per_call: tuple[str, ...]  # nodes whose every call is its own training sample
    threads: tuple[str, ...]  # threads that form one training sample each
    fanout: bool  # a rollout can yield several samples (list[Sample] for slime)
    trained_nodes: tuple[str, ...]


class Plan(BaseModel):
    """The frozen execution plan; `graphrl run` and the slime target execute exactly this."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    format: Literal["graphrl.plan/2"] = "graphrl.plan/2"
    graphrl_version: str
    name: str
    description: str | None = None
    source: dict[str, str]
    start: str
    constants: dict[str, Any] = {}
    models: dict[str, ModelDecl]
    inputs: dict[str, InputDecl]
    state: dict[str, StateVar]
    threads: dict[str, Thread]
    nodes: dict[str, PlanNode]
    # a `graph` node's child plan, by node id (absent when the graph has none): the child's own
    # inputs, state, threads and nodes, with the parent's models; lowered and located like this one
    subgraphs: dict[str, Plan] | None = None
    reward: Reward | None = None
    environment: EnvironmentDecl | None = None
    limits: Limits
    targets: dict[str, dict[str, Any]]  # each compile target's section of the graph, as JSON
    training: Training
    templates: dict[str, TemplateFile]
    spans: dict[str, str]

    def span(self, *path: Any) -> str | None:
        """file:line:col of the value at `path` (or its nearest located ancestor)."""
        parts = [str(p) for p in path]
        while parts:
            hit = self.spans.get(".".join(parts))
            if hit:
                return hit
            parts.pop()
        return self.source.get("file")


def plan_json(plan: Plan) -> str:
    """Canonical JSON: fixed key order, 2-space indent, UTF-8, trailing newline."""
    data = plan.model_dump(mode="json", by_alias=True, exclude_none=True)
    return json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n"


class PlanFormatError(UsageProblem):
    """A plan.json written by another plan format version: recompile the graph."""


def load_plan(path: str | Path) -> Plan:
    text = Path(path).read_text(encoding="utf-8")
    try:
        fmt = json.loads(text).get("format")
    except (ValueError, AttributeError):
        fmt = None
    if isinstance(fmt, str) and fmt.startswith("graphrl.plan/") and fmt != PLAN_FORMAT:
        raise PlanFormatError(
            f"{path}: plan format {fmt}, this graphrl reads {PLAN_FORMAT}: "
            "recompile the graph (graphrl compile GRAPH -o DIR)"
        )
    return Plan.model_validate_json(text)
