"""Composite rewards (`reward.terms`): weighted built-ins combined without Python."""

from __future__ import annotations

from graphrl.compilers.lower import plan_from_path

GRAPH = """\
name: composite
inputs: {question: prompt, answer: label}
nodes:
  solve:
    llm: policy
    prompt: [{user: "{{ question }}"}]
    next: search
  search:
    tool: "composite_tools:lookup"
    args: {q: "{{ solve.text }}"}
reward:
  terms:
    correct: {fn: math_equal, args: {prediction: "{{ solve.text }}", label: "{{ answer }}"}}
    boxed: {fn: format, args: {text: "{{ solve.text }}", pattern: "\\\\\\\\boxed\\\\{"}, weight: 0.5}
    searched: {fn: tool_use, args: {calls: "{{ usage.calls.search | default(0) }}", min: 1}, weight: 0.25}
  COMBINE
"""


def _plan(kit, combine="combine: sum"):
    kit.write("composite_tools.py", "def lookup(q):\n    return 'ok'\n")
    return kit.plan(GRAPH.replace("COMBINE", combine))


def test_terms_are_weighted_and_summed_and_the_score_is_trained(kit):
    plan = _plan(kit)
    assert plan.reward.key == "score"  # resolved in the plan: slime's --reward-key score
    res = kit.run(kit.executor(plan, {"policy": kit.engine([r"It is \boxed{4}"])}), {"prompt": "2+2", "label": "4"})
    assert res.status == "completed", res.error
    assert res.reward == {"score": 1.75, "correct": 1.0, "boxed": 1.0, "searched": 1.0}
    assert res.samples[0].reward == 1.75


def test_max_combines_like_a_format_score(kit):
    plan = _plan(kit, "combine: max")
    res = kit.run(kit.executor(plan, {"policy": kit.engine([r"\boxed{5}"])}), {"prompt": "2+2", "label": "4"})
    assert res.reward == {"score": 0.5, "correct": 0.0, "boxed": 1.0, "searched": 1.0}


def test_fn_and_terms_together_and_unknown_terms_are_located_errors(kit):
    path = kit.write("bad.yaml", GRAPH.replace("COMBINE", "fn: exact_match").replace("fn: tool_use", "fn: tool_usage"))
    plan, diags = plan_from_path(path)
    assert plan is None
    both = [d for d in diags if "either fn" in d.message]
    assert both and both[0].code == "E003"
    path = kit.write("bad2.yaml", GRAPH.replace("COMBINE", "").replace("fn: tool_use", "fn: tool_usage"))
    plan, diags = plan_from_path(path)
    (d,) = [d for d in diags if d.code == "E305"]
    assert "tool_usage" in d.message and d.hint == "did you mean 'tool_use'?" and d.span.line == 15
