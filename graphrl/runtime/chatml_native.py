"""graphrl's own ChatML chat template (`graphrl.models.chat_template.QWEN_CHAT_TEMPLATE`) in plain Python.

Input: `messages` (a list of plain message dicts, as `chat_template.template_message` makes them),
`tools` (None or a list of JSON-schema dicts), `add_generation_prompt`.
Output: the text the compiled Jinja template renders for the same inputs, or None ("declined") when
the input falls outside what this renderer was written and tested to reproduce; the caller then
renders with Jinja, which gives the reference text or raises the reference error.

Why: a chat thread renders its whole conversation on every LLM call; the Jinja template costs
~0.3-0.6 ms a render, this a few microseconds per message.

Invariants:
  * exactness: for every input it does not decline, the result is byte-identical to the Jinja
    rendering of QWEN_CHAT_TEMPLATE (tests/runtime/test_chatml_native.py checks it differentially);
  * only the template whose sha256 is TEMPLATE_SHA256 is rendered here (`renders(source)`); an edit
    of the template turns this path off until this module and its pin are updated;
  * pure: inputs are never mutated, nothing is cached, no exception escapes (any error -> None).

Accepted (rendered natively) -- anything else declines:
  * messages: a list/tuple of exact `dict`s whose `role` is an exact `str`
    (Jinja raises on a missing or non-str role, since `'<|im_start|>' + role` is evaluated);
  * content (and a system message's content): `str`; `None` or a missing key (both render '');
    a list/tuple of parts where a `dict` part with `type == 'text'` contributes its `text`
    (an exact `str`, or '' when the key is missing) and other `dict` parts and parts of plain
    non-mapping types (str, int, float, bool, None, list, tuple) contribute nothing;
  * tool_calls: missing or falsy (no calls), or a list/tuple of `dict` calls; a call's function is
    `call["function"]` when that key exists (even if its value is not a dict: then it declines),
    else the call itself; it must be a `dict` with a `str` name and an `arguments` key whose value
    is written verbatim if a `str`, else as `json.dumps(arguments, ensure_ascii=False)`;
  * tools: falsy (no tools header) or a list/tuple; each tool is written with that same json.dumps;
  * add_generation_prompt: any value; Python truthiness, as Jinja's `{% if %}`.
Declined on purpose (Jinja renders them, but they are rare and not worth emulating): content of
other types (int, float, bool, dict: Jinja renders ''), a `text` part whose text is not a str
(Jinja renders str(text), e.g. 'None'), non-dict mappings and non-plain objects anywhere they are
inspected, str/dict/list subclasses, `tools` that is a non-list truthy value, truthy non-list tool_calls.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["TEMPLATE_SHA256", "render_chatml", "renders", "tools_json"]

# sha256 of graphrl.models.chat_template.QWEN_CHAT_TEMPLATE, the template reproduced here.
TEMPLATE_SHA256 = "6589f1691d3ec1e49daf18fd47bfbb0c3f18b273ba62d0eb6fc9b61bd6104df0"

# The template's `tojson` filter is json.dumps(x, ensure_ascii=False) (indent, separators, sort_keys
# at their defaults), which encodes with CPython's C encoder built anew per call. Here that C encoder
# is built once, with the same settings except the circular-reference check (markers=None): a
# circular value raises RecursionError instead of ValueError, and any error declines.
try:
    from json.encoder import c_make_encoder as _c_make_encoder  # type: ignore[attr-defined]  # CPython's C part
    from json.encoder import encode_basestring as _encode_basestring
except ImportError:  # pragma: no cover - a json module without its C accelerator
    _c_make_encoder = _encode_basestring = None  # type: ignore[assignment]  # the native renderer declines


def _not_serializable(o: Any) -> Any:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _make_tojson() -> Any:
    reference = json.JSONEncoder(ensure_ascii=False).encode
    try:
        encode = _c_make_encoder(None, _not_serializable, _encode_basestring, None, ": ", ", ", False, False, True)
        probe = {"a": [1, 2.5, None, True, "é\n\U0001d11e"], "b": {"c": float("nan")}}
        if "".join(encode(probe, 0)) != reference(probe):
            return reference
    except Exception:  # no C encoder, or a different signature: the pure-Python settings
        return reference

    def tojson(value: Any) -> str:
        return "".join(encode(value, 0))

    return tojson


_tojson = _make_tojson()

_TOOLS_HEAD = (
    "# Tools\n\nThese functions are available to you. Each line inside <tools></tools> is the "
    "JSON schema of one function:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nTo call a function, write a JSON object with its name and arguments inside "
    "<tool_call></tool_call> tags, one block per call:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call><|im_end|>\n'
)

# Parts the template's text() macro skips (`part is mapping` is false) and that we accept as such.
_SKIPPED_PARTS = frozenset({str, int, float, bool, type(None), list, tuple})


class _Decline(Exception):
    """The input is outside what this renderer reproduces; Jinja must render it."""


def renders(source: str) -> bool:
    """Whether `source` is exactly the template this module reproduces."""
    return (
        isinstance(source, str)
        and hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest() == TEMPLATE_SHA256
    )


def render_chatml(
    messages: Any, tools: Any = None, add_generation_prompt: Any = False, tools_text: str | None = None
) -> str | None:
    """The rendering of QWEN_CHAT_TEMPLATE for these plain inputs, or None to let Jinja render them.
    `tools_text`: `tools_json(tools)` computed before, for a caller that renders the same tools often
    (a chat thread: its own copy of the schemas, never changed)."""
    try:
        return _render(messages, tools, add_generation_prompt, tools_text)
    except Exception:  # _Decline, or an error Jinja would raise too (json.dumps of a non-JSON value)
        return None


def tools_json(tools: Any) -> str | None:
    """The tool schemas' lines of the system turn ("\n" + the JSON of each), or None (declined)."""
    try:
        return _tools_json(tools)
    except Exception:
        return None


def _tools_json(tools: Any) -> str:
    if type(tools) is not list and type(tools) is not tuple:
        raise _Decline
    return "".join(["\n" + _tojson(tool) for tool in tools])


def _text(content: Any) -> str:
    """The template's text() macro."""
    t = type(content)
    if t is str:
        return content
    if content is None:
        return ""
    if t is list or t is tuple:
        out = []
        for part in content:
            pt = type(part)
            if pt is dict:
                if part.get("type") == "text" and "text" in part:
                    text = part["text"]
                    if type(text) is not str:
                        raise _Decline  # Jinja writes str(text): 'None', '3', ...
                    out.append(text)
            elif pt not in _SKIPPED_PARTS:
                raise _Decline
        return "".join(out)
    raise _Decline


def _render(messages: Any, tools: Any, add_generation_prompt: Any, tools_text: str | None = None) -> str:
    if type(messages) is not list and type(messages) is not tuple:
        raise _Decline
    roles = []
    for message in messages:
        if type(message) is not dict:
            raise _Decline
        role = message.get("role")
        if type(role) is not str:
            raise _Decline
        roles.append(role)
    n = len(roles)
    has_system = n > 0 and roles[0] == "system"
    out: list[str] = []
    add = out.append

    if tools:
        if type(tools) is not list and type(tools) is not tuple:
            raise _Decline
        add("<|im_start|>system\n")
        if has_system:
            add(_text(messages[0].get("content")))
            add("\n\n")
        add(_TOOLS_HEAD)
        add(_tools_json(tools) if tools_text is None else tools_text)
        add(_TOOLS_TAIL)
    elif has_system:
        add("<|im_start|>system\n")
        add(_text(messages[0].get("content")))
        add("<|im_end|>\n")

    for i in range(1 if has_system else 0, n):
        message = messages[i]
        role = roles[i]
        if role == "tool":
            if i == 0 or roles[i - 1] != "tool":
                add("<|im_start|>user")
            add("\n<tool_response>\n")
            add(_text(message.get("content")))
            add("\n</tool_response>")
            if i == n - 1 or roles[i + 1] != "tool":
                add("<|im_end|>\n")
        elif role == "assistant":
            body = _text(message.get("content"))
            add("<|im_start|>assistant\n")
            add(body)
            calls = message.get("tool_calls")
            if calls:
                if type(calls) is not list and type(calls) is not tuple:
                    raise _Decline
                first = True
                for call in calls:
                    if type(call) is not dict:
                        raise _Decline
                    fn = call["function"] if "function" in call else call
                    if type(fn) is not dict:
                        raise _Decline
                    name = fn.get("name")
                    if type(name) is not str or "arguments" not in fn:
                        raise _Decline  # Jinja raises: str + non-str, tojson(Undefined)
                    if body or not first:
                        add("\n")
                    first = False
                    add('<tool_call>\n{"name": "')
                    add(name)
                    add('", "arguments": ')
                    arguments = fn["arguments"]
                    if type(arguments) is str:
                        add(arguments)
                    elif isinstance(arguments, str):
                        raise _Decline  # a str subclass: Jinja writes str(arguments) verbatim
                    else:
                        add(_tojson(arguments))
                    add("}\n</tool_call>")
            add("<|im_end|>\n")
        else:
            add("<|im_start|>")
            add(role)
            add("\n")
            add(_text(message.get("content")))
            add("<|im_end|>\n")

    if add_generation_prompt:
        add("<|im_start|>assistant\n")
    return "".join(out)
