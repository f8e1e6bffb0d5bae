"""`tools:` on any llm node: the tool schemas are rendered into that call's prompt by the chat
template, as `apply_chat_template(messages, tools=...)` does (real Qwen tokenizer)."""

from __future__ import annotations

from graphrl.compilers.checks import check_file

SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]

GRAPH = """\
name: node_tools
inputs: {question: prompt}
constants:
  schemas: SCHEMAS
models:
  helper: {url: "http://127.0.0.1:1"}
nodes:
  plan:
    llm: policy
    prompt: [system: Use tools when needed., user: "{{ question }}"]
    tools: "{{ schemas }}"
    next: ask
  ask:
    llm: helper
    prompt: [user: "{{ plan.text }}"]
    tools: TOOLS2
"""


def _graph(tools2: str = '"{{ schemas }}"') -> str:
    import json

    return GRAPH.replace("SCHEMAS", json.dumps(SCHEMAS)).replace("TOOLS2", tools2)


def test_tools_on_llm_nodes_render_into_their_prompts(kit, tok):
    plan = kit.plan(_graph())
    policy, helper = kit.engine(["<tool_call>x</tool_call>"]), kit.engine(["ok"])
    res = kit.run(kit.executor(plan, {"policy": policy, "helper": helper}), {"prompt": "Who won?"})
    assert res.status == "completed", res.error
    msgs = [{"role": "system", "content": "Use tools when needed."}, {"role": "user", "content": "Who won?"}]
    want = tok.apply_chat_template(msgs, tools=SCHEMAS, tokenize=False, add_generation_prompt=True)
    assert list(policy.requests[0].input_ids) == list(tok.encode(want, add_special_tokens=False))
    assert '"name": "search"' in want and list(res.samples[0].prompt_ids) == list(policy.requests[0].input_ids)
    # a frozen model's call too
    want = tok.apply_chat_template(
        [{"role": "user", "content": "<tool_call>x</tool_call>"}],
        tools=SCHEMAS,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert list(helper.requests[0].input_ids) == list(tok.encode(want, add_special_tokens=False))


def test_tools_that_are_not_a_list_of_schemas_fail_the_rollout_located(kit):
    plan = kit.plan(_graph('"{{ question }}"'))
    res = kit.run(kit.executor(plan, {"policy": kit.engine(["a"]), "helper": kit.engine(["b"])}), {"prompt": "q"})
    assert res.status == "failed"
    assert "tools of 'ask' must be a list of tool JSON schemas" in res.error and "g.yaml:16:12" in res.error


def test_tools_on_a_thread_node_point_at_the_threads_tools(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(
        "name: t\nthreads:\n  main: {prompt: [user: q]}\nnodes:\n  s:\n    llm: policy\n    thread: main\n"
        '    tools: "{{ [] }}"\n'
    )
    _, diags = check_file(path)
    (d,) = diags
    assert d.code == "E003" and "threads.main.tools" in d.message and d.span.line == 6


def test_a_tools_template_is_checked_like_any_template(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text('name: t\nnodes:\n  s:\n    llm: policy\n    prompt: q\n    tools: "{{ schemass }}"\n')
    _, diags = check_file(path)
    (d,) = diags
    assert d.code == "E202" and d.span.line == 6
