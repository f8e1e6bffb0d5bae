"""Chat-template rendering: messages (+ tools, template variables) -> the text a model is prompted with.

Input: a Jinja chat template (a Hugging Face tokenizer's `chat_template`), the tokenizer's special
tokens map, chat messages, JSON-schema tools.
Output: the rendered text, byte-for-byte what `tokenizer.apply_chat_template(messages, tools=...,
add_generation_prompt=..., tokenize=False, **kwargs)` returns.

Why not call `apply_chat_template` every time: it re-sanitises the whole conversation on every call
(~100 us for a 20-message conversation); a thread renders once per LLM call, on the hot path.
Here each message is made template-safe once, when it enters the thread (`template_message`), and
rendering is a single call of the compiled template -- or, for graphrl's own ChatML template, of
its byte-identical Python rendering (`chatml_native`), with Jinja as the fallback for any input that
declines.

Invariants: rendering is a pure function of (template, constants, messages, tools, variables);
messages are never mutated; the compiled template is the one transformers compiles (same sandbox,
filters and extensions) when transformers is importable, an equivalent sandbox otherwise.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from graphrl.runtime import chatml_native

# Names a message's reasoning may be given under; templates read `reasoning_content` (Qwen3) or
# `thinking` (gpt-oss). transformers copies the first one set under both names; so do we.
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")

# The keyword arguments render() gives the template itself.
_RENDER_ARGS = frozenset({"messages", "tools", "documents", "add_generation_prompt"})


def plain(value: Any) -> Any:
    """A copy of `value` made only of JSON-like types (what a sandboxed template may see)."""
    t = type(value)
    if value is None or t is str or t is int or t is float or t is bool:
        return value
    if t is dict:  # the common containers first: exact types skip the slow typing.Mapping check
        return {plain(k): plain(v) for k, v in value.items()}
    if t is list:
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return plain(value.model_dump())
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return plain(value.item())
    return f"<{type(value).__name__}>"


def template_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """One chat message as the template sees it: plain data, reasoning aliased like transformers."""
    if not isinstance(message, Mapping):
        raise TypeError(f"a chat message must be a mapping, got {type(message).__name__}")
    out = plain(message)
    reasoning = next((out[k] for k in _REASONING_KEYS if out.get(k) is not None), None)
    if reasoning is not None:
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
    return out


def template_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tools as JSON schemas (dicts). Callables are not accepted: the plan carries schemas."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            raise TypeError(f"a tool must be a JSON-schema mapping, got {type(tool).__name__}")
        out.append(plain(tool))
    return out


def compile_template(source: str) -> Any:
    """The compiled Jinja template, compiled exactly as transformers compiles chat templates."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # transformers absent or reorganised: an equivalent sandbox
        return _own_environment().from_string(source)
    return _compile_jinja_template(source)


def _own_environment() -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class Generation(jinja2.ext.Extension):  # `{% generation %}` blocks render their body
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class TemplateRenderer:
    """Renders conversations with one chat template and fixed constants (special tokens)."""

    def __init__(self, source: str, constants: Mapping[str, Any] | None = None, *, native: bool = True):
        """`native=False` always renders with Jinja (the reference path)."""
        if not source:
            raise ValueError("the tokenizer has no chat template")
        self.source = source
        self._compiled = compile_template(source)
        self._constants = plain(dict(constants or {}))
        # graphrl's own ChatML template is also rendered in Python (chatml_native), byte-identical and
        # >10x faster; it reads no constants, but constants that clash with render()'s own keyword
        # arguments (or are not names) make the Jinja call raise, so those keep the Jinja path.
        self.native: bool = (
            bool(native)
            and chatml_native.renders(source)
            and all(type(k) is str and k not in _RENDER_ARGS for k in self._constants)
        )

    @classmethod
    def for_tokenizer(
        cls, tokenizer: Any, chat_template: str | None = None, *, native: bool = True
    ) -> TemplateRenderer:
        source = chat_template or getattr(tokenizer, "chat_template", None)
        if isinstance(source, Mapping):  # named templates: the default one, as transformers does
            source = source.get("default")
        if not source:
            raise ValueError(f"{type(tokenizer).__name__} has no chat template; pass chat_template=")
        return cls(source, getattr(tokenizer, "special_tokens_map", {}), native=native)

    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any] | None = None,
    ) -> str:
        """Render messages already passed through `template_message` (plain data)."""
        messages = list(messages)
        if self.native and not variables:
            text = chatml_native.render_chatml(messages, tools, add_generation_prompt)
            if text is not None:
                return text  # else: an input the native renderer declines; Jinja is the reference
        kwargs = {**self._constants, **(variables or {})}
        return self._compiled.render(
            messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **kwargs
        )
