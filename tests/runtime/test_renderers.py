"""Per-model chat templates (`chat_template:` files, `chat_template_kwargs`), token-exact against the
real Qwen tokenizer: the ids sent to the engine and trained are the template's rendering, encoded
once, then only new text -- as `tokenizer.apply_chat_template(..., chat_template=FILE, **kwargs)`
gives for the whole conversation."""

from __future__ import annotations

import pytest

from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.renderers import ModelRenderers
from graphrl.runtime.services import StaticEndpoints

# An append-only template different from the tokenizer's: a fixed preamble, "### role" headers, and
# Qwen3's `enable_thinking: false` switch (an empty <think> block opens the generation prompt).
CUSTOM = r"""{{- '[custom template]\n' -}}
{%- for m in messages -%}
{{- '<|im_start|>### ' + m.role + '\n' + m.content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>### assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}
{%- endif -%}
"""

ONE_CALL = """\
name: custom_template
inputs: {question: prompt}
models:
  policy: {chat_template: chat.jinja KWARGS}
nodes:
  solve:
    llm: policy
    prompt:
      - system: You are terse.
      - user: "{{ question }}"
"""

THREAD = """\
name: custom_thread
inputs: {question: prompt}
models:
  policy: {chat_template: chat.jinja}
threads:
  main: {prompt: [{user: "{{ question }}"}]}
nodes:
  solve:
    llm: policy
    thread: main
    max_visits: 3
    next:
      - {when: "visit < 3", goto: look}
      - goto: end
  look:
    append_to: {thread: main, role: tool, content: "result {{ visit }}"}
    next: solve
"""


def _apply(tok, messages, **kw) -> list[int]:
    text = tok.apply_chat_template(messages, chat_template=CUSTOM, tokenize=False, add_generation_prompt=True, **kw)
    return list(tok.encode(text, add_special_tokens=False))


def test_a_models_chat_template_file_renders_its_prompt(kit, tok):
    kit.write("chat.jinja", CUSTOM)
    plan = kit.plan(ONE_CALL.replace("KWARGS", ""))
    assert plan.models["policy"].chat_template == CUSTOM  # inlined: the plan is self-contained
    assert [f.rsplit("/", 1)[-1] for f in plan.templates] == ["chat.jinja"]
    engine = kit.engine(["42"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "6 x 7?"})
    assert res.status == "completed", res.error
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "6 x 7?"}]
    want = _apply(tok, messages)
    assert list(engine.requests[0].input_ids) == want == list(res.samples[0].prompt_ids)
    default = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert list(tok.encode(default, add_special_tokens=False)) != want  # the tokenizer's template is not used


def test_chat_template_kwargs_reach_the_template(kit, tok):
    kit.write("chat.jinja", CUSTOM)
    plan = kit.plan(ONE_CALL.replace("KWARGS", ", chat_template_kwargs: {enable_thinking: false}"))
    engine = kit.engine(["42"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "6 x 7?"})
    assert res.status == "completed", res.error
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "6 x 7?"}]
    sent = list(engine.requests[0].input_ids)
    assert sent == _apply(tok, messages, enable_thinking=False)
    assert sent != _apply(tok, messages)
    assert kit.r.decode(sent).endswith("### assistant\n<think>\n\n</think>\n\n")


def test_a_thread_grows_by_the_custom_templates_deltas(kit, tok):
    kit.write("chat.jinja", CUSTOM)
    plan = kit.plan(THREAD)
    engine = kit.engine(["one", "two", "three"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "count"})
    assert res.status == "completed", res.error
    (s,) = res.samples
    history = [
        {"role": "user", "content": "count"},
        {"role": "assistant", "content": "one"},
        {"role": "tool", "content": "result 1"},
        {"role": "assistant", "content": "two"},
        {"role": "tool", "content": "result 2"},
    ]
    # the last call was sent exactly the from-scratch rendering of the conversation so far
    assert list(engine.requests[2].input_ids) == _apply(tok, history)
    assert list(s.tokens) == list(engine.requests[2].input_ids) + list(kit.ids("three"))
    assert [sp.mask for sp in s.spans if sp.kind == "generated"] == [1, 1, 1]


def test_renderers_are_built_once_per_model_and_keep_the_native_default(kit, tok):
    kit.write("chat.jinja", CUSTOM)
    plan = kit.plan(
        ONE_CALL.replace("KWARGS", "").replace(
            "models:\n", "models:\n  judge: {url: 'http://127.0.0.1:1', chat_template_kwargs: {x: 1}}\n"
        )
    )
    base = ChatRenderer(tok)
    rs = ModelRenderers(plan, StaticEndpoints({}, base))
    custom = rs.for_model("policy")
    assert custom is rs.for_model("policy") and custom is not base
    assert custom.template.source == CUSTOM and custom.tokenizer is tok
    assert custom.stop_token_ids == base.stop_token_ids and custom.vocab_size == base.vocab_size
    judge = rs.for_model("judge")
    assert judge.template.kwargs == {"x": 1} and judge.template.source == base.template.source
    assert base.template.native  # the default renderer keeps graphrl's native ChatML path


def test_a_chat_template_that_does_not_compile_fails_the_rollout_located(kit):
    kit.write("chat.jinja", CUSTOM)
    plan = kit.plan(ONE_CALL.replace("KWARGS", ""))
    broken = plan.model_copy(
        update={
            "models": {**plan.models, "policy": plan.models["policy"].model_copy(update={"chat_template": "{% if"})}
        }
    )
    res = kit.run(kit.executor(broken, {"policy": kit.engine(["x"])}), {"prompt": "q"})
    assert res.status == "failed"
    assert "chat template of model 'policy'" in res.error and "chat_template" in res.error


@pytest.mark.parametrize("where", ["outside", "missing"])
def test_a_chat_template_outside_the_templates_folder_or_missing_is_E007(kit, where):
    from graphrl.compilers.checks import check_file

    (kit.dir / "prompts").mkdir()
    kit.write("elsewhere.jinja", CUSTOM)
    name = "elsewhere.jinja" if where == "outside" else "prompts/nope.jinja"
    path = kit.write("g.yaml", "templates: prompts\n" + ONE_CALL.replace("chat.jinja KWARGS", name))
    g, diags = check_file(path)
    (d,) = [d for d in diags if d.severity == "error"]
    assert d.code == "E007" and d.span.line == 5
    assert ("outside the templates folder" if where == "outside" else "not found") in d.message
