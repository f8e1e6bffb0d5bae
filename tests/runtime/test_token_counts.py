"""Token counts in templates: `| token_count` (the policy's tokenizer, or a named model's) and
`thread_tokens.<thread>` (the exact ids a thread holds), checked by `graphrl check` and usable in
routing (e.g. to stop or summarise before a context budget)."""

from __future__ import annotations

GRAPH = """
name: token_counts
inputs:
  question: prompt
threads:
  main:
    prompt:
      - user: "{{ question }}"
nodes:
  talk:
    llm: policy
    thread: main
    max_visits: 5
    update:
      sizes: "{{ thread_tokens.main }}"
      counted: "{{ output.text | token_count }}"
    append_to: {thread: main, role: user, content: "go on"}
    next:
      - {when: "thread_tokens.main > BUDGET", goto: end}
      - goto: talk
state:
  sizes: {default: [], merge: append}
  counted: {default: [], merge: append}
"""


def test_thread_tokens_and_token_count_are_exact_and_route(kit):
    res = kit.rollout(
        GRAPH.replace("BUDGET", "40"),
        {"policy": kit.engine(["one two three four five"] * 5)},
        {"prompt": "Count with me."},
    )
    assert res.status == "completed", res.error
    n = len(kit.r.encode("one two three four five"))
    assert res.state["counted"] == [n] * len(res.state["counted"])
    (s,) = res.samples
    assert res.state["sizes"][-1] <= len(s.tokens)  # what the thread held when the node last ran
    assert all(a < b for a, b in zip(res.state["sizes"], res.state["sizes"][1:]))  # it only grows
    assert res.state["sizes"][-1] > 40 and all(x <= 40 for x in res.state["sizes"][:-1])  # stopped past it
    assert len(res.state["sizes"]) < 5


def test_the_checker_knows_both(kit):
    from graphrl.compilers.checks import check_file

    path = kit.write("g.yaml", GRAPH.replace("BUDGET", "40"))
    _, diags = check_file(path)
    assert [d for d in diags if d.severity == "error"] == []
