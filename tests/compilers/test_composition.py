"""Sub-graph and fork compilation: the flow graph of a fork, the plan of nested sub-graphs (the top
graph's models and limits all the way down), and checks that follow a child into its own file."""

from __future__ import annotations

import textwrap
from pathlib import Path

from graphrl.compilers.checks import check_file
from graphrl.compilers.flow import build_flow
from graphrl.compilers.lower import plan_from_path
from graphrl.plan import load_plan, plan_json

FORK = """\
name: fork
inputs: {question: prompt}
nodes:
  fork:
    parallel: [a, b]
    max: 1
    next:
      - {when: "a.text", goto: join}
      - goto: end
  a: {llm: policy, prompt: "A {{ question }}"}
  b: {llm: policy, prompt: "B {{ question }}"}
  join: {llm: policy, prompt: "{{ a.text }} {{ b.text }}"}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def test_a_forks_branches_lead_to_its_next_targets_and_it_does_not_skip_them(tmp_path):
    g, diags = check_file(_write(tmp_path, "fork.yaml", FORK))
    assert g is not None and not [d for d in diags if d.severity == "error"], diags
    edges = {(u, v): d["labels"] for u, v, d in build_flow(g).graph.edges(data=True)}
    assert edges[("fork", "a")] == ["branch"] and edges[("fork", "b")] == ["branch"]
    assert edges[("a", "join")] == ["when a.text"] and edges[("b", "end")] == ["else"]
    assert ("fork", "join") not in edges and ("fork", "end") not in edges  # control passes the branches


def test_a_branch_sees_no_sibling_but_the_join_sees_all(tmp_path):
    bad = FORK.replace('prompt: "B {{ question }}"', 'prompt: "B {{ a.text }}"')
    _, diags = check_file(_write(tmp_path, "fork.yaml", bad))
    assert [(d.code, d.message) for d in diags] == [
        (
            "E202",
            "'a' is another branch of fork 'fork': branches run at the same time and do not see each other's results",
        )
    ]


def test_a_branch_sees_no_sibling_in_a_loop_either_and_a_caught_fork_has_an_error(tmp_path):
    """In a loop a sibling is an ancestor of a branch (the flow goes round), yet on the first round it
    has not run: refused all the same. A fork's on_error target reads fork.error (its result then)."""
    looped = FORK.replace("    max: 1\n", "    max: 1\n    max_visits: 2\n    on_error: recover\n")
    looped = looped.replace("goto: end\n", "goto: fork\n", 1)
    looped = looped.replace('prompt: "B {{ question }}"', 'prompt: "B {{ a.text }}"')
    looped += '  recover: {llm: policy, prompt: "{{ fork.error }} after {{ fork.branches }}"}\n'
    _, diags = check_file(_write(tmp_path, "fork.yaml", looped))
    assert [(d.code, d.span.line) for d in diags] == [("E202", 13)], [str(d) for d in diags]
    ok = looped.replace('prompt: "B {{ a.text }}"', 'prompt: "B {{ question }}"')
    _, diags = check_file(_write(tmp_path, "fork.yaml", ok))
    assert not diags, [str(d) for d in diags]
    _, diags = check_file(_write(tmp_path, "fork.yaml", ok.replace("fork.error", "fork.eror")))
    assert [(d.code, d.hint) for d in diags] == [("E204", "did you mean 'error'?")]


def test_nested_sub_graphs_lower_with_the_top_graphs_models_and_limits(tmp_path):
    _write(tmp_path, "inner.yaml", "name: inner\nnodes:\n  x: {llm: policy, prompt: hi}\n")
    _write(tmp_path, "middle.yaml", "name: middle\nnodes:\n  in: {graph: inner.yaml}\n")
    top = _write(
        tmp_path,
        "top.yaml",
        """\
        name: top
        models: {judge: {url: "http://127.0.0.1:9"}}
        limits: {max_steps: 7}
        nodes:
          mid: {graph: middle.yaml}
        """,
    )
    plan, diags = plan_from_path(top)
    assert plan is not None, diags
    middle = plan.subgraphs["mid"]
    inner = middle.subgraphs["in"]
    assert inner.nodes["x"].kind == "llm" and inner.name == "inner"
    for p in (middle, inner):
        assert p.limits.max_steps == 7 and set(p.models) == {"judge", "policy"}
    assert plan.training.fanout  # the children's samples join the rollout
    f = tmp_path / "plan.json"
    f.write_text(plan_json(plan), encoding="utf-8")
    assert plan_json(load_plan(f)) == plan_json(plan)


def test_a_child_is_checked_once_per_file_even_when_two_nodes_run_it(tmp_path):
    _write(tmp_path, "child.yaml", "name: child\nnodes:\n  x: {llm: policy, prompt: '{{ nope }}'}\n")
    top = _write(
        tmp_path,
        "top.yaml",
        "name: top\nnodes:\n  a: {graph: child.yaml, next: b}\n  b: {graph: child.yaml}\n",
    )
    _, diags = check_file(top)
    assert [(d.code, Path(d.span.file).name, d.span.line) for d in diags] == [("E202", "child.yaml", 3)]


def test_slime_settings_that_break_fan_out_are_refused_for_a_graph_whose_samples_come_from_a_child(tmp_path):
    _write(tmp_path, "child.yaml", "name: child\nnodes:\n  x: {llm: policy, prompt: hi}\n")
    top = _write(tmp_path, "top.yaml", "name: top\nslime: {partial_rollout: true}\nnodes:\n  a: {graph: child.yaml}\n")
    _, diags = check_file(top)
    assert [d.code for d in diags] == ["E403"]


def test_branch_rules_each_have_their_own_message(tmp_path):
    text = """\
    name: forks
    start: s
    nodes:
      s:
        next: [{when: "row", goto: d}, {goto: f}]
      f: {parallel: [a, a, b, c, f], next: g}
      g: {parallel: [c, d], next: end}
      a: {llm: policy, prompt: hi}
      b: {llm: policy, prompt: hi, foreach: "[1]"}
      c: {llm: policy, prompt: hi}
      d: {llm: policy, prompt: hi}
    """
    _, diags = check_file(_write(tmp_path, "forks.yaml", text))
    got = sorted(d.message for d in diags if d.code == "E316")
    assert got == [
        "branch 'a' of fork 'f' is listed twice",
        "branch 'b' of fork 'f' has foreach:",
        "branch 'c' of fork 'g' is also a branch of 'f'",
        "branch 'd' of fork 'g' is also reached from 's'",
        "branch 'f' of fork 'f' is the fork itself",
    ]


def test_an_inline_group_has_its_own_constants_and_the_files(tmp_path):
    text = """\
    name: g
    constants: {turns: 2}
    nodes:
      solve:
        graph:
          constants: {k: 3}
          nodes:
            draft: {llm: policy, prompt: "hi {{ k }} {{ turns }}", max_visits: $k, next: again}
            again: {llm: policy, prompt: "again", max_visits: $turns, next: [{when: "visit < 9", goto: draft}, {goto: end}]}
    """
    plan, diags = plan_from_path(_write(tmp_path, "g.yaml", text))
    assert plan is not None, diags
    child = plan.subgraphs["solve"]
    assert child.nodes["draft"].max_visits == 3 and child.nodes["again"].max_visits == 2
    assert child.constants == {"turns": 2, "k": 3}
    _, diags = check_file(_write(tmp_path, "bad.yaml", text.replace("$k,", "$kk,")))
    assert [(d.code, d.message, d.span.line) for d in diags] == [("E308", "'$kk' names no constant", 8)]
