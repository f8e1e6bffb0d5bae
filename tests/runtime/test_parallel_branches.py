"""`parallel:` forks: different nodes at once (at most `max`), each seeing the state from before its
batch; results, state writes and samples applied in listed order; a branch may be a sub-graph."""

from __future__ import annotations

from test_subgraphs import CHILD, Engine

FORK = """\
name: fork
inputs: {question: prompt}
state:
  notes: {default: [], merge: append}
nodes:
  fork:
    parallel: [a, b, c]
    max: MAX
    ONERROR
    next: join
  a:
    llm: policy
    prompt: "a style0 {{ question }} seen {{ notes | length }}"
    update: {notes: "{{ output.text }}"}
  b:
    llm: policy
    prompt: "b style1 {{ question }} seen {{ notes | length }}"
    update: {notes: "{{ output.text }}"}
  c:
    graph: solver.yaml
    inputs: {question: "{{ question }}", style: "STYLE"}
    update: {notes: "{{ output.answer }}"}
  join:
    llm: policy
    prompt: "pick {{ notes | join(' | ') }} {{ fork.branches | default([]) | join(',') }}"
"""


def _run(kit, width, *, style="style2", on_error=""):
    kit.write("solver.yaml", CHILD)
    plan = kit.plan(FORK.replace("MAX", str(width)).replace("STYLE", style).replace("ONERROR", on_error), "fork.yaml")
    engine = Engine(kit)
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q"})
    return res, engine


def test_branches_run_at_once_and_apply_in_listed_order(kit):
    res, engine = _run(kit, 3)
    assert res.status == "completed", res.error
    assert engine.max_in_flight == 3  # a, b and the sub-graph's first call
    assert res.state["notes"] == ["style0 a", "style1 b", "style2 refine"]  # listed order, not finish order
    prompts = [kit.r.decode(s.prompt_ids) for s in res.samples]
    assert "seen 0" in prompts[0] and "seen 0" in prompts[1]  # both saw the state from before the fork
    assert [s.spans[-1].node for s in res.samples] == ["a", "b", "c/refine", "join"]
    assert [n for n, _ in res.path] == ["fork", "a", "b", "c", "c/draft", "c/refine", "join"]
    assert "a,b,c" in prompts[-1]


def test_max_bounds_the_branches_at_once_and_later_batches_see_earlier_writes(kit):
    res, engine = _run(kit, 1)
    assert res.status == "completed", res.error
    assert engine.max_in_flight == 1
    assert res.state["notes"] == ["style0 a", "style1 b", "style2 refine"]
    assert "seen 1" in kit.r.decode(res.samples[1].prompt_ids)  # b ran after a's write


def test_a_fault_in_a_branch_is_the_forks_and_its_on_error_catches_it(kit):
    res, _ = _run(kit, 3, style="fail")
    assert res.status == "failed" and "the server fell over" in res.error
    assert len(res.samples) == 3  # a, b and the sub-graph's draft are kept
    res, _ = _run(kit, 3, style="fail", on_error="on_error: join")
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path][-1] == "join"
