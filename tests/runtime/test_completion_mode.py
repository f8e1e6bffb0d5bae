"""Completion mode (`completion: true` on a model or an llm node): no chat template; the prompt is
the messages' text as written, tokenised as is; a thread grows by new text only, and in-response
observations keep the Search-R1 layout. Token-level, against the real Qwen tokenizer."""

from __future__ import annotations

import pytest

from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted
from graphrl.models.tokenizer import QWEN_TOKEN_IDS
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.chat_template import CompletionModeError

IM_START, IM_END = QWEN_TOKEN_IDS["<|im_start|>"], QWEN_TOKEN_IDS["<|im_end|>"]
ENDOFTEXT = QWEN_TOKEN_IDS["<|endoftext|>"]

PROMPT = "Question: What is 6 x 7?\nAnswer:"


def _encode(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("where", ["model", "node"])
def test_a_completion_prompt_is_its_text_tokenised_as_is(kit, tok, where):
    model = "models:\n  policy: {completion: true}\n" if where == "model" else ""
    node = "    completion: true\n" if where == "node" else ""
    plan = kit.plan(
        "name: base\ninputs: {question: prompt}\n"
        + model
        + "nodes:\n  solve:\n    llm: policy\n"
        + node
        + '    prompt: [system: "Question: {{ question }}\\n", user: "Answer:"]\n'
    )
    engine = kit.engine([" 42"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "What is 6 x 7?"})
    assert res.status == "completed", res.error
    sent = list(engine.requests[0].input_ids)
    assert sent == _encode(tok, PROMPT) == list(res.samples[0].prompt_ids)
    assert IM_START not in sent and IM_END not in sent
    assert res.samples[0].response_ids == kit.ids(" 42")


SEARCH = """\
name: base_search
models:
  policy: {completion: true}
inputs: {question: prompt}
threads:
  main: {prompt: [user: "Question: {{ question }}\\n"]}
nodes:
  think:
    llm: policy
    thread: main
    stop: ["</search>"]
    max_visits: 3
    parse: {tags: [search, answer]}
    next:
      - {when: "visit == 1", goto: search}
      - {when: "visit == 2", goto: hint}
      - goto: end
  search:
    append_to: {thread: main, in_response: true, content: "\\n<information>Paris</information>\\n"}
    next: think
  hint:
    append_to: {thread: main, role: user, content: "\\nHint: answer in one word.\\n"}
    next: think
"""


def _stopped(kit, text: str) -> Scripted:
    ids = kit.ids(text, stop=False)
    return Scripted(
        output_ids=ids, logprobs=(-0.5,) * len(ids), finish_reason=FinishReason("stop", matched="</search>")
    )


def test_a_completion_thread_grows_by_new_text_only_with_in_response_observations(kit, tok):
    plan = kit.plan(SEARCH)
    out1 = "<search>capital of France</search>"
    engine = kit.engine([_stopped(kit, out1), _stopped(kit, "It is Paris."), "<answer>Paris</answer>"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Capital of France?"})
    assert res.status == "completed", res.error
    (s,) = res.samples
    prompt = _encode(tok, "Question: Capital of France?\n")
    obs = _encode(tok, "\n<information>Paris</information>\n")
    hint = _encode(tok, "\nHint: answer in one word.\n")
    want = prompt + list(kit.ids(out1, stop=False)) + obs + list(kit.ids("It is Paris.", stop=False)) + hint
    assert list(engine.requests[2].input_ids) == want  # each call continued from exactly these ids
    assert list(s.tokens) == want + list(kit.ids("<answer>Paris</answer>"))
    assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [
        ("think", "generated", 1),
        ("search", "observation", 0),
        ("think", "generated", 1),
        ("hint", "observation", 0),
        ("think", "generated", 1),
    ]
    assert IM_START not in s.tokens and IM_END not in s.tokens[:-1]  # no turn markers anywhere


def test_after_a_stop_token_the_token_stays_and_new_text_follows(kit, tok):
    r = ChatRenderer(tok, completion=True)
    thread = r.thread([{"role": "user", "content": "Q: 2+2\nA:"}])
    first = thread.prepare()
    assert list(first.ids) == _encode(tok, "Q: 2+2\nA:")
    out = _encode(tok, " 4") + [ENDOFTEXT]
    assert thread.add_output(out, FinishReason("stop", matched=ENDOFTEXT)) == " 4"
    thread.add_messages([{"role": "user", "content": "\nQ: 3+3\nA:"}])
    delta = thread.prepare()
    assert delta.kind == "append" and delta.kept_stop
    assert list(thread.ids) == _encode(tok, "Q: 2+2\nA:") + out + _encode(tok, "\nQ: 3+3\nA:")


def test_completion_mode_renders_no_tools_and_only_text():
    from graphrl.runtime.chat_template import CompletionRenderer

    c = CompletionRenderer()
    msgs = [
        {"role": "system", "content": "a"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "b"},
    ]
    assert c.render(msgs, add_generation_prompt=True) == "ab"
    with pytest.raises(CompletionModeError, match="tool schemas"):
        c.render(msgs, tools=[{"type": "function"}], add_generation_prompt=True)
    with pytest.raises(CompletionModeError, match="text contents only"):
        c.render([{"role": "user", "content": ["x"]}], add_generation_prompt=True)


def test_a_per_call_model_that_switches_a_chat_thread_to_completion_fails_located(kit):
    plan = kit.plan(
        """\
name: dynamic_mix
models:
  base: {url: "http://127.0.0.1:1", completion: true}
inputs: {question: prompt}
state: {pick: base}
threads:
  main: {prompt: [user: "{{ question }}"]}
nodes:
  solve:
    llm: "{{ pick }}"
    thread: main
    sample: none
"""
    )
    res = kit.run(kit.executor(plan, {"policy": kit.engine(["x"]), "base": kit.engine(["x"])}), {"prompt": "q"})
    assert res.status == "failed"
    assert "cannot mix completion mode and chat turns" in res.error and "g.yaml:10:" in res.error
