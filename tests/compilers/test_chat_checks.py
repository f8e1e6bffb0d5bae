"""Chat-template checks (graphrl.compilers.checks.chat) and the sample layout of threads that a chat
template may re-render: W406 only where a thread is re-rendered after its outputs with a template
file that rewrites history; fan-out only for such threads with on_drift: new_sample."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from graphrl.compilers.checks import check_file
from graphrl.compilers.flow import build_flow
from graphrl.compilers.layout import rerendered_threads, sample_layout

PROMPTS = Path(__file__).resolve().parents[1] / "fixtures" / "invalid" / "prompts"

# The model's output in a thread stays as generated: an append-only template
APPEND_ONLY = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
# Rewrites history only when the template variable asks for it
SWITCHED = (
    "{%- for m in messages -%}{%- set c = m.content -%}"
    "{%- if drop and m.role == 'assistant' and not loop.last -%}{%- set c = c.split('</think>')[-1] -%}{%- endif -%}"
    "{{- '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

LOOP = """\
name: loop
inputs: {question: prompt}
models:
  policy: MODEL
threads:
  main: {prompt: [user: "{{ question }}"] DRIFT}
nodes:
  solve:
    llm: policy
    thread: main
    max_visits: 2
    next:
      - {when: "visit < 2", goto: more}
      - goto: end
  more:
    append_to: APPEND
    next: solve
"""


def _check(tmp_path, model="{chat_template: qwen3_style.jinja}", append="{thread: main, role: user}", drift=""):
    shutil.copy(PROMPTS / "qwen3_style.jinja", tmp_path / "qwen3_style.jinja")
    (tmp_path / "append_only.jinja").write_text(APPEND_ONLY)
    (tmp_path / "switched.jinja").write_text(SWITCHED)
    path = tmp_path / "g.yaml"
    path.write_text(LOOP.replace("MODEL", model).replace("APPEND", append).replace(" DRIFT", drift))
    g, diags = check_file(path)
    assert g is not None, [d.render() for d in diags]
    return g, diags


def codes(diags):
    return [d.code for d in diags]


def test_a_rewriting_template_on_a_rerendered_thread_warns_and_fans_out(tmp_path):
    g, diags = _check(tmp_path, drift=", on_drift: new_sample")
    (w,) = [d for d in diags if d.code == "W406"]
    assert "'user' message" in w.message and "new training sample" in w.message
    layout = sample_layout(g, build_flow(g))
    assert layout.fanout and layout.drift == ("main",)


def test_on_drift_fail_says_the_rollout_fails_and_keeps_one_sample(tmp_path):
    g, diags = _check(tmp_path, drift=", on_drift: fail")
    (w,) = [d for d in diags if d.code == "W406"]
    assert "the rollout fails" in w.message
    layout = sample_layout(g, build_flow(g))
    assert not layout.fanout and layout.drift == ()


@pytest.mark.parametrize(
    "model, append",
    [
        ("{chat_template: append_only.jinja}", "{thread: main, role: user}"),  # keeps history
        ("{chat_template: qwen3_style.jinja}", "{thread: main, in_response: true}"),  # never re-rendered
        ("{}", "{thread: main, role: user}"),  # the tokenizer's template: known only at run time
        ("{chat_template: switched.jinja, chat_template_kwargs: {drop: false}}", "{thread: main, role: user}"),
    ],
)
def test_no_warning_where_no_rewrite_is_known(tmp_path, model, append):
    _, diags = _check(tmp_path, model=model, append=append)
    assert "W406" not in codes(diags)


def test_template_kwargs_reach_the_probe(tmp_path):
    _, diags = _check(tmp_path, model="{chat_template: switched.jinja, chat_template_kwargs: {drop: true}}")
    assert "W406" in codes(diags)


def test_in_response_only_threads_are_not_rerendered(tmp_path):
    g, _ = _check(tmp_path, append="{thread: main, in_response: true}")
    assert rerendered_threads(g, build_flow(g)) == {}
    assert not sample_layout(g, build_flow(g)).fanout


def test_a_tool_message_before_the_first_call_is_no_rerender(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(
        "name: pre\ninputs: {question: prompt}\nthreads:\n  main: {prompt: [user: q]}\nnodes:\n"
        "  look:\n    append_to: {thread: main}\n    next: solve\n  solve:\n    llm: policy\n    thread: main\n"
    )
    g, diags = check_file(path)
    assert g is not None and rerendered_threads(g, build_flow(g)) == {}


def test_completion_with_a_chat_template_is_E003(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(
        "name: both\nmodels:\n  policy: {completion: true, chat_template_kwargs: {a: 1}}\n"
        "nodes:\n  s:\n    llm: policy\n    prompt: q\n"
    )
    _, diags = check_file(path)
    (d,) = diags
    assert d.code == "E003" and "completion: true means no chat template" in d.message


def test_E403_names_on_drift_when_a_rewrite_can_fan_out(tmp_path):
    _, diags = _check(tmp_path, drift=", on_drift: new_sample")
    path = tmp_path / "g.yaml"
    path.write_text(path.read_text() + "slime:\n  partial_rollout: true\n")
    _, diags = check_file(path)
    (d,) = [d for d in diags if d.code == "E403"]
    assert "on_drift: fail on thread 'main'" in d.hint
