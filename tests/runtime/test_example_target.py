"""A second compile target, written the way a user would add one: a throwaway target that writes
plain JSONL samples. It touches no spec, runtime or slime module: its settings section, its check,
its emit and its runtime adapter live in this file, and `graphrl.runtime.outcome.settle` decides
what each rollout means for training (statuses, credit, placeholders), as it does for slime."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from graphrl.compilers.checks import check_file
from graphrl.compilers.flow import Flow
from graphrl.compilers.lower import lower
from graphrl.compilers.targets import TARGETS, Target
from graphrl.plan import Plan, plan_json
from graphrl.runtime.outcome import settle
from graphrl.spec.diagnostics import Diagnostic, has_errors
from graphrl.spec.load import Graph


class JsonlSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    keep_failed: bool = True


class JsonlTargetForTests:
    name = "jsonl"
    settings = JsonlSettings
    runtime_adapter = "tests.runtime.test_example_target:JsonlAdapterForTests"

    def check(self, g: Graph, flow: Flow, settings: BaseModel) -> Iterator[Diagnostic]:
        assert isinstance(settings, JsonlSettings)
        if not settings.keep_failed and g.spec.reward is None:
            yield Diagnostic("E003", "jsonl: keep_failed: false needs a reward", g.span("jsonl", "keep_failed"))

    def emit(self, plan: Plan, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "plan.json"
        path.write_text(plan_json(plan), encoding="utf-8")
        return [path]


class JsonlAdapterForTests:
    """The runtime side: rollout results -> JSON lines, only writing fields."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.keep_failed = JsonlSettings.model_validate(plan.targets.get("jsonl") or {}).keep_failed

    def lines(self, res: Any) -> list[str]:
        outcome = settle(self.plan, res)
        rows = [so for so in outcome.samples if self.keep_failed or not so.remove]
        return [
            json.dumps(
                {
                    "rollout": res.rollout_id,
                    "status": so.status,
                    "reward": so.reward,
                    "remove": so.remove,
                    "tokens": list(so.sample.tokens),
                    "mask": list(so.sample.loss_mask),
                }
            )
            for so in rows
        ]


HELLO_WITH_JSONL = """\
name: hello_jsonl
inputs: {question: prompt, answer: label}
nodes:
  solve:
    llm: policy
    prompt: [{user: "{{ question }}"}]
    max_tokens: 16
    parse: {boxed: answer}
reward:
  fn: exact_match
  args: {prediction: "{{ solve.answer }}", label: "{{ answer }}"}
jsonl:
  keep_failed: false
"""


def test_the_section_is_unknown_until_the_target_is_registered(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(HELLO_WITH_JSONL, encoding="utf-8")
    _, diags = check_file(path)  # the shipped targets: slime only
    assert [(d.code, "'jsonl'" in d.message) for d in diags] == [("E002", True)]
    targets: tuple[Target, ...] = (*TARGETS, JsonlTargetForTests())
    g, diags = check_file(path, targets=targets)
    assert g is not None and not has_errors(diags)
    assert g.targets["jsonl"] == JsonlSettings(keep_failed=False)


def test_a_target_check_is_located_in_its_section(tmp_path):
    path = tmp_path / "g.yaml"
    text = HELLO_WITH_JSONL.split("reward:")[0] + "jsonl: {keep_failed: false}\n"  # no reward
    path.write_text(text, encoding="utf-8")
    _, diags = check_file(path, targets=(*TARGETS, JsonlTargetForTests()))
    (d,) = [d for d in diags if "keep_failed" in d.message]
    assert d.code == "E003" and d.span is not None
    assert text.splitlines()[d.span.line - 1][d.span.col - 1 :].startswith("false")


def test_the_example_target_compiles_and_writes_settled_samples(kit):
    path = kit.write("g.yaml", HELLO_WITH_JSONL)
    target = JsonlTargetForTests()
    g, diags = check_file(path, targets=(*TARGETS, target))
    assert g is not None and not has_errors(diags)
    plan = lower(g)
    assert plan.targets == {"jsonl": {"keep_failed": False}}
    (written,) = target.emit(plan, kit.dir / "out")
    assert json.loads(written.read_text())["targets"]["jsonl"] == {"keep_failed": False}

    ex = kit.executor(plan, {"policy": kit.engine([r"\boxed{4}", r"\boxed{5}", kit.reply("x", finish="abort")])})
    results = [kit.run(ex, {"prompt": "2+2?", "label": "4"}, rollout_id=i) for i in range(3)]
    adapter = JsonlAdapterForTests(plan)
    rows = [json.loads(line) for r in results for line in adapter.lines(r)]
    assert [(r["rollout"], r["status"], r["reward"], r["remove"]) for r in rows] == [
        (0, "completed", 1.0, False),
        (1, "completed", 0.0, False),
    ]  # the aborted rollout is dropped
    assert rows[0]["mask"].count(1) == len(kit.ids(r"\boxed{4}"))
