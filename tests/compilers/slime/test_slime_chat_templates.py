"""The slime target runs the plan's chat-template settings: a model's `chat_template` (inlined into
plan.json, no file needed at run time), its `chat_template_kwargs`, and completion mode."""

from __future__ import annotations

from slime_standin import ArgsStandIn, SampleStandIn

TEMPLATE = (
    "{{- '[slime custom]\\n' -}}"
    "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}"
)

GRAPH = """\
name: templated
inputs: {question: prompt}
models:
  policy: {chat_template: chat.jinja, chat_template_kwargs: {enable_thinking: false}}
nodes:
  solve:
    llm: policy
    prompt: [user: "{{ question }}"]
    next: base
  base:
    llm: policy
    completion: true
    sample: none
    prompt: [user: "Q: {{ question }}\\nA:"]
"""


def test_slime_generate_renders_with_the_plans_template_kwargs_and_completion_mode(slime_kit, qwen_tok, tmp_path):
    src = tmp_path / "graph"
    src.mkdir()
    (src / "chat.jinja").write_text(TEMPLATE)
    (src / "g.yaml").write_text(GRAPH)
    out = slime_kit.compile(src / "g.yaml")
    (src / "chat.jinja").unlink()  # the plan carries the template
    assert "[slime custom]" in (out / "plan.json").read_text()
    eng = slime_kit.engine(["Paris", "Paris"])
    sample = SampleStandIn(prompt="Capital of France?", label="Paris", index=1, group_index=0)
    got = slime_kit.run(slime_kit.target({"policy": eng}), sample, ArgsStandIn())
    chat = qwen_tok.apply_chat_template(
        [{"role": "user", "content": "Capital of France?"}],
        chat_template=TEMPLATE,
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert chat.startswith("[slime custom]") and chat.endswith("</think>\n\n")
    first, second = (list(r.input_ids) for r in eng.requests)
    assert first == list(qwen_tok.encode(chat, add_special_tokens=False))
    assert got.tokens[: len(first)] == first
    assert second == list(qwen_tok.encode("Q: Capital of France?\nA:", add_special_tokens=False))
