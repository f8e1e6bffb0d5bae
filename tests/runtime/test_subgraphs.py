"""`graph:` nodes run a child graph file in its own scope: sequential, per foreach item, in parallel;
the child's samples, calls and path join the rollout under qualified ids, in item order; faults,
aborts and limits inside the child end the rollout as they would in the parent."""

from __future__ import annotations

import asyncio

import pytest

from graphrl.engines.base import EngineError
from graphrl.runtime.executor import RolloutInput

CHILD = """\
name: solver
inputs:
  question: prompt
  style: {from: metadata.style, default: plain}
state:
  answer: ""
threads:
  work: {prompt: [{system: "You solve."}]}
nodes:
  draft:
    llm: policy
    thread: work
    prompt: "draft {{ style }}: {{ question }}"
    next: refine
  refine:
    llm: policy
    thread: work
    prompt: "refine {{ style }}"
    update: {answer: "{{ output.text }}"}
    next:
      - {when: "'ABORT' in output.text", goto: abort}
      - goto: end
"""

PARENT = """\
name: parent
inputs: {question: prompt, styles: metadata.styles}
state:
  answers: {default: [], merge: append}
limits: {max_steps: STEPS}
nodes:
  solve:
    graph: solver.yaml
    inputs: {question: "{{ question }}", style: "{{ item }}"}
    foreach: {over: styles, parallel: PAR}
    update: {answers: "{{ output.answer }}"}
    ONERROR
    next: pick
  pick:
    llm: policy
    prompt: "pick from {{ answers | join(' | ') }} ({{ solve.ok }})"
"""


class Engine:
    """Replies `<style> <step>` per call; style0's calls finish last; `fail` / `abort` / ABORT styles misbehave."""

    def __init__(self, kit):
        self.kit = kit
        self.in_flight = self.max_in_flight = 0

    async def generate(self, ids, params, *, session_id=None):
        text = self.kit.r.decode(ids)
        last = text.rsplit("<|im_start|>user\n", 1)[-1]
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.05 if "style0" in last else 0.0)  # forces finish order, asserts no time
        self.in_flight -= 1
        if "refine fail" in last:
            raise EngineError("the server fell over")
        step = "pick" if last.startswith("pick") else last.split(" ", 1)[0]
        style = next((s for s in ("style0", "style1", "style2", "abort", "ABORT") if s in last), "-")
        reply = self.kit.reply(f"{style} {step}", finish="abort" if "refine abort" in last else None)
        return await self.kit.engine([reply]).generate(ids, params, session_id=session_id)

    async def close(self):
        pass


def _run(kit, styles, *, par=1, steps=100, on_error=""):
    kit.write("solver.yaml", CHILD)
    text = PARENT.replace("PAR", str(par)).replace("STEPS", str(steps)).replace("ONERROR", on_error)
    plan = kit.plan(text, "parent.yaml")
    engine = Engine(kit)
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q", "metadata": {"styles": styles}})
    return res, engine


def test_a_sub_graph_per_item_joins_samples_calls_and_path_under_qualified_ids(kit):
    res, engine = _run(kit, ["style0", "style1"])
    assert res.status == "completed", res.error
    assert res.state["answers"] == ["style0 refine", "style1 refine"]
    assert list(res.path) == [
        ("solve", 1),
        ("solve/draft", 1),
        ("solve/refine", 1),
        ("solve", 2),
        ("solve/draft", 2),
        ("solve/refine", 2),
        ("pick", 1),
    ]
    # one thread sample per child run (its own scope: the second run starts a fresh thread), then pick
    assert [[(sp.node, sp.visit) for sp in s.spans if sp.kind == "generated"] for s in res.samples] == [
        [("solve/draft", 1), ("solve/refine", 1)],
        [("solve/draft", 2), ("solve/refine", 2)],
        [("pick", 1)],
    ]
    assert "draft style0" not in kit.r.decode(res.samples[1].tokens)  # no history shared between runs
    assert {s.rollout_id for s in res.samples} == {0}
    assert [(c.node, c.visit) for c in res.calls] == [
        ("solve/draft", 1),
        ("solve/refine", 1),
        ("solve/draft", 2),
        ("solve/refine", 2),
        ("pick", 1),
    ]
    assert "(True)" in kit.r.decode(res.samples[2].prompt_ids)  # the result's ok field
    assert engine.max_in_flight == 1


def test_parallel_sub_graphs_run_at_once_and_join_in_item_order(kit):
    res, engine = _run(kit, ["style0", "style1", "style2"], par=3)
    assert res.status == "completed", res.error
    assert engine.max_in_flight == 3
    assert res.state["answers"] == ["style0 refine", "style1 refine", "style2 refine"]  # item order, not finish order
    firsts = [kit.response_text(s).split(" ")[0] for s in res.samples[:3]]
    assert firsts == ["style0", "style1", "style2"]
    assert [(sp.node, sp.visit) for sp in res.samples[0].spans if sp.kind == "generated"][0] == ("solve/draft", 1)
    assert [n for n, _ in res.path][:3] == ["solve"] * 3


def test_a_fault_inside_the_child_fails_the_rollout_keeping_the_samples_made(kit):
    res, _ = _run(kit, ["style1", "fail"])
    assert res.status == "failed" and "the server fell over" in res.error
    assert len(res.samples) == 2 and all(s.status == "failed" for s in res.samples)
    assert [sp.node for sp in res.samples[1].spans if sp.kind == "generated"] == ["solve/draft"]
    assert ("solve/draft", 2) in res.path and "pick" not in [n for n, _ in res.path]


def test_on_error_of_the_graph_node_catches_a_fault_inside_the_child(kit):
    res, _ = _run(kit, ["fail"], on_error="on_error: pick")
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["solve", "solve/draft", "solve/refine", "pick"]
    assert "pick from" in kit.r.decode(res.samples[-1].prompt_ids)


@pytest.mark.parametrize("style, by", [("abort", "engine"), ("ABORT", "graph")])
def test_an_abort_inside_the_child_aborts_the_rollout(kit, style, by):
    res, _ = _run(kit, ["style1", style, "style2"])
    assert res.status == "aborted" and res.aborted_by == by, res.error
    assert res.reward is None and "pick" not in [n for n, _ in res.path]
    assert ("solve", 3) not in res.path  # nothing starts after the abort
    assert len(res.samples) == 2 and {s.status for s in res.samples} == {"aborted"}


def test_the_childs_steps_count_toward_the_rollouts_max_steps(kit):
    res, _ = _run(kit, ["style1", "style2"], steps=4)
    assert res.status == "truncated" and "max_steps" in res.error
    assert [n for n, _ in res.path] == ["solve", "solve/draft", "solve/refine", "solve"]


INNER = """\
name: inner
inputs: {question: prompt}
nodes:
  guess:
    llm: policy
    prompt: "guess style1: {{ question }}"
    reward: {fn: value, args: {value: "{{ 1 if 'guess' in output.text else 0 }}"}}
"""

MIDDLE = """\
name: middle
inputs: {question: prompt}
state: {seen: ""}
nodes:
  fork:
    parallel: [deep, quick]
    next: done
  deep:
    graph: inner.yaml
    inputs: {question: "{{ question }}"}
    update: {seen: "{{ output.text }}"}
  quick:
    llm: policy
    prompt: "quick style2: {{ question }}"
  done:
    graph: inner.yaml
    inputs: {question: "again"}
"""

TOP = """\
name: top
inputs: {question: prompt}
reward: {fn: value, args: {value: "1"}, node_rewards: own}
nodes:
  outer:
    graph: middle.yaml
    inputs: {question: "{{ question }}"}
    next: last
  last:
    llm: policy
    prompt: "last style0 {{ outer.seen }} then {{ outer }}"
"""


def test_nested_sub_graphs_and_a_fork_inside_one_qualify_names_and_keep_node_rewards(kit):
    kit.write("inner.yaml", INNER)
    kit.write("middle.yaml", MIDDLE)
    plan = kit.plan(TOP, "top.yaml")
    res = kit.run(kit.executor(plan, {"policy": Engine(kit)}), {"prompt": "Q"})
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == [
        "outer",
        "outer/fork",
        "outer/deep",
        "outer/quick",
        "outer/deep/guess",
        "outer/done",
        "outer/done/guess",
        "last",
    ]
    assert [s.spans[0].node for s in res.samples] == ["outer/deep/guess", "outer/quick", "outer/done/guess", "last"]
    last = kit.r.decode(res.samples[3].prompt_ids)
    assert "last style0 style1 guess then style1 guess" in last  # outer.seen, and the text of outer's last node
    # the innermost node reward follows its sample through both renamings
    assert res.samples[0].metadata["role"] == "outer/deep/guess" and res.samples[0].reward == 1.0
    assert "role" not in res.samples[1].metadata


class AbortingEngine(Engine):
    """Sets the caller's abort flag during the child's first call (as slime's abort would)."""

    def __init__(self, kit, flag):
        super().__init__(kit)
        self.flag = flag
        self.calls = 0

    async def generate(self, ids, params, *, session_id=None):
        self.calls += 1
        self.flag.set()
        return await super().generate(ids, params, session_id=session_id)


def test_the_callers_abort_stops_the_child_at_its_next_node(kit):
    kit.write("solver.yaml", CHILD)
    plan = kit.plan(PARENT.replace("PAR", "1").replace("STEPS", "100").replace("ONERROR", ""), "parent.yaml")
    flag = asyncio.Event()
    engine = AbortingEngine(kit, flag)
    row = {"prompt": "Q", "metadata": {"styles": ["style1", "style2"]}}
    res = asyncio.run(kit.executor(plan, {"policy": engine}).run(RolloutInput(row=row, rollout_id=0), abort=flag))
    assert res.status == "aborted" and res.aborted_by == "caller", res.error
    assert engine.calls == 1  # draft ran; refine, item 2 and pick never started
    assert [n for n, _ in res.path] == ["solve", "solve/draft"]
    assert len(res.samples) == 1 and res.samples[0].status == "aborted"


class HangingEngine(Engine):
    """Answers drafts; a refine call never returns (the rollout's timeout has to end it)."""

    async def generate(self, ids, params, *, session_id=None):
        if "refine" in self.kit.r.decode(ids).rsplit("<|im_start|>user\n", 1)[-1]:
            await asyncio.Event().wait()
        return await super().generate(ids, params, session_id=session_id)


@pytest.mark.parametrize("par", [1, 2])
def test_a_timeout_inside_children_fails_the_rollout_keeping_their_samples(kit, par):
    kit.write("solver.yaml", CHILD)
    text = PARENT.replace("PAR", str(par)).replace("STEPS", "100").replace("ONERROR", "")
    plan = kit.plan(text.replace("limits: {max_steps: 100}", "limits: {timeout_s: 0.5}"), "parent.yaml")
    res = kit.run(
        kit.executor(plan, {"policy": HangingEngine(kit)}),
        {"prompt": "Q", "metadata": {"styles": ["style1", "style2"]}},
    )
    assert res.status == "failed" and "timed out" in res.error
    # the draft of each child that started is kept, in item order, named and numbered as a child's
    assert [[(sp.node, sp.visit) for sp in s.spans if sp.kind == "generated"] for s in res.samples] == [
        [("solve/draft", i + 1)] for i in range(par)
    ]
    assert all(s.status == "failed" for s in res.samples)


INLINE = """\
name: inline
constants: {prefix: "draft"}
inputs: {question: prompt, styles: metadata.styles}
state:
  answers: {default: [], merge: append}
nodes:
  solve:
    graph:
      inputs: {question: prompt, style: {from: prompt}}
      state: {answer: ""}
      nodes:
        one:
          llm: policy
          prompt: "{{ prefix }} {{ style }}: {{ question }}"
          update: {answer: "{{ output.text }}"}
    inputs: {question: "{{ question }}", style: "{{ item }}"}
    foreach: {over: styles, parallel: 2}
    update: {answers: "{{ output.answer }}"}
"""


def test_an_inline_group_runs_like_a_file_and_sees_the_files_constants(kit):
    plan = kit.plan(INLINE, "inline.yaml")
    assert plan.subgraphs["solve"].name == "inline.solve"
    assert plan.subgraphs["solve"].span("nodes", "one", "prompt").endswith("inline.yaml:14:19")  # in the parent file
    engine = Engine(kit)
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q", "metadata": {"styles": ["style0", "style1"]}})
    assert res.status == "completed", res.error
    assert engine.max_in_flight == 2
    assert res.state["answers"] == ["style0 draft", "style1 draft"]
    assert [(s.spans[0].node, s.spans[0].visit) for s in res.samples] == [("solve/one", 1), ("solve/one", 2)]


def test_the_plan_hash_follows_the_sub_graph_files(kit):
    """Resume compares the plan's hash: editing only the child file must make a new plan."""
    kit.write("solver.yaml", CHILD)
    parent = PARENT.replace("PAR", "1").replace("STEPS", "100").replace("ONERROR", "")
    before = kit.plan(parent, "parent.yaml").source["sha256"]
    assert kit.plan(parent, "parent.yaml").source["sha256"] == before  # deterministic
    kit.write("solver.yaml", CHILD.replace("draft {{ style }}", "first draft {{ style }}"))
    assert kit.plan(parent, "parent.yaml").source["sha256"] != before


def test_a_child_file_may_include_shared_sections(kit):
    """A sub-graph file is a whole graph: its own `include:` merges before it is checked and run."""
    kit.write("shared.yaml", "constants:\n  greeting: hello\n")
    kit.write(
        "solver.yaml",
        "include: shared.yaml\n" + CHILD.replace('"draft {{ style }}', '"{{ greeting }} draft {{ style }}'),
    )
    plan = kit.plan(PARENT.replace("PAR", "1").replace("STEPS", "100").replace("ONERROR", ""), "parent.yaml")
    res = kit.run(kit.executor(plan, {"policy": Engine(kit)}), {"prompt": "Q", "metadata": {"styles": ["style1"]}})
    assert res.status == "completed", res.error
    assert "hello draft style1: Q" in kit.r.decode(res.samples[0].tokens)
