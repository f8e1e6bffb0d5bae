"""compilers/checks/threads.py: a thread's overflow policy is complete (E320), its summary model is
declared (E301) and trained only when it is the policy (E321); the summary's own names (`dropped`,
`summary`) are bound where the summary call renders them."""

from __future__ import annotations

from graphrl.compilers.checks import check_file

GRAPH = """
name: t
models:
  writer: {url: "http://127.0.0.1:30001"}
threads:
  chat:
    prompt: [user: "{{ row.prompt }}"]
BUDGET
    on_overflow: summarize
    summarize:
      llm: writer
      prompt: [user: "{% for m in dropped %}{{ m.role }}: {{ m.content }}\\n{% endfor %}"]
      content: "Earlier: {{ summary }}"
nodes:
  talk:
    llm: policy
    thread: chat
    max_visits: 4
    append_to: {thread: chat, role: user, content: "Go on."}
    next: talk
"""


def _codes(tmp_path, text: str) -> list[tuple[str, int]]:
    f = tmp_path / "g.yaml"
    f.write_text(text, encoding="utf-8")
    _, diags = check_file(f)
    return [(d.code, d.span.line if d.span else 0) for d in diags if d.severity == "error"]


def test_a_complete_summarize_policy_checks_clean(tmp_path):
    assert _codes(tmp_path, GRAPH.replace("BUDGET", "    max_tokens: 2048")) == []


def test_summarize_without_a_budget_is_e320_at_on_overflow(tmp_path):
    assert _codes(tmp_path, GRAPH.replace("BUDGET\n", "")) == [("E320", 8)]


def test_dropped_is_bound_only_in_the_summary_prompt(tmp_path):
    text = GRAPH.replace("BUDGET", "    max_tokens: 2048").replace("Earlier: {{ summary }}", "{{ dropped }}")
    assert _codes(tmp_path, text) == [("E202", 13)]
