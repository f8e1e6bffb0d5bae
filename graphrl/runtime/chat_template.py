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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from graphrl.runtime import chatml_native
from graphrl.spec.chat_jinja import compile_template, own_environment

_own_environment = own_environment  # the reference sandbox (tests compare against it)

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
    if type(message) is dict and len(message) == 2:  # the common {role, content} text message
        role, content = message.get("role"), message.get("content")
        if type(role) is str and type(content) is str:
            return {"role": role, "content": content}  # what plain() makes of it, without the walk
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


class TemplateRenderer:
    """Renders conversations with one chat template, fixed constants (special tokens) and fixed
    template variables (a model's `chat_template_kwargs`, e.g. Qwen3's `enable_thinking`)."""

    completion = False

    def __init__(
        self,
        source: str,
        constants: Mapping[str, Any] | None = None,
        *,
        native: bool = True,
        kwargs: Mapping[str, Any] | None = None,
    ):
        """`native=False` always renders with Jinja (the reference path)."""
        if not source:
            raise ValueError("the tokenizer has no chat template")
        self.source = source
        self._compiled = compile_template(source)
        self._constants = plain(dict(constants or {}))
        self.kwargs: dict[str, Any] = plain(dict(kwargs or {}))
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
        cls,
        tokenizer: Any,
        chat_template: str | None = None,
        *,
        native: bool = True,
        kwargs: Mapping[str, Any] | None = None,
    ) -> TemplateRenderer:
        source = chat_template or getattr(tokenizer, "chat_template", None)
        if isinstance(source, Mapping):  # named templates: the default one, as transformers does
            source = source.get("default")
        if not source:
            raise ValueError(f"{type(tokenizer).__name__} has no chat template; pass chat_template=")
        return cls(source, getattr(tokenizer, "special_tokens_map", {}), native=native, kwargs=kwargs)

    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any] | None = None,
        tools_text: str | None = None,
    ) -> str:
        """Render messages already passed through `template_message` (plain data). `tools_text`:
        `chatml_native.tools_json(tools)`, computed once by a caller whose `tools` never change."""
        messages = list(messages)
        if self.kwargs:
            variables = {**self.kwargs, **(variables or {})}
        if self.native and not variables:
            text = chatml_native.render_chatml(messages, tools, add_generation_prompt, tools_text)
            if text is not None:
                return text  # else: an input the native renderer declines; Jinja is the reference
        kwargs = {**self._constants, **(variables or {})}
        return self._compiled.render(
            messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt, **kwargs
        )


class CompletionModeError(ValueError):
    """Something only a chat template can render (tool schemas) was given to completion mode."""


class CompletionRenderer:
    """Completion mode (no chat template): the prompt is the messages' contents, concatenated as
    written -- no roles, no turn markers, no generation prompt. Appending a message appends its
    content, so a thread in completion mode only ever grows by the new text (append-only)."""

    completion = True
    native = False
    source = None
    kwargs: dict[str, Any] = {}

    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        tools: list[dict] | None = None,
        add_generation_prompt: bool,
        variables: Mapping[str, Any] | None = None,
        tools_text: str | None = None,
    ) -> str:
        if tools:
            raise CompletionModeError("completion mode has no chat template to render tool schemas into")
        out = []
        for m in messages:
            content = m.get("content")
            if content is None:
                continue
            if not isinstance(content, str):
                raise CompletionModeError(
                    f"completion mode renders text contents only; a {m.get('role')!r} message has "
                    f"{type(content).__name__} content"
                )
            out.append(content)
        return "".join(out)
