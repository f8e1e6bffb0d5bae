"""The chat-template probe (`history_rewrite`): which templates rewrite a conversation's history."""

from __future__ import annotations

from pathlib import Path

from graphrl.spec.chat_jinja import PROBE_OUTPUT, compile_template, history_rewrite

QWEN3_STYLE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "invalid" / "prompts" / "qwen3_style.jinja"
).read_text()
CHATML = (
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def test_a_template_that_drops_earlier_think_blocks_rewrites_after_a_user_turn_only():
    t = compile_template(QWEN3_STYLE)
    role, held, now = history_rewrite(t, ["tool", "user"])
    assert role == "user" and held.startswith("<think>") and now.startswith("answer<|im_end|>")
    assert history_rewrite(t, ["tool"]) is None  # a tool result keeps the last user turn where it was


def test_an_append_only_template_and_a_refusing_one_are_not_flagged():
    assert history_rewrite(compile_template(CHATML), ["user", "tool", "system"]) is None
    refusing = compile_template("{{ raise_exception('no system messages') }}")
    assert history_rewrite(refusing, ["user"]) is None  # cannot be judged: left to the runtime check


def test_variables_reach_the_probe():
    t = compile_template("{% for m in messages %}{{ m.content if keep or m.role != 'assistant' else '' }}|{% endfor %}")
    assert history_rewrite(t, ["user"], {"keep": True}) is None
    assert history_rewrite(t, ["user"], {"keep": False}) is not None
    assert "<think>" in PROBE_OUTPUT
