"""Rendering and state: the plan's templates + a rollout's values -> strings, values, state updates.

Input: a `Plan` (its templates compiled once, lazily, per process) and the rollout's namespace.
Output: rendered prompts/arguments, evaluated expressions, merged state.

Invariants: a failing template or expression raises `RenderError` naming the plan location
(file:line:col of the YAML or template file); values that arrive through variables — model output
included — are data and are never compiled as templates; state merges follow the variable's
declaration (overwrite / append / keyed) and its truncation limits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from jinja2 import Undefined
from jinja2.exceptions import TemplateError, TemplateSyntaxError, UndefinedError

from ..plan import Plan
from ..spec.jinja import _SINGLE_EXPR, compile_expression, compile_template, make_env
from ..spec.model import StateVar
from . import fastexpr


class RenderError(Exception):
    """A template or expression failed at run time; `where` is file:line:col in the graph."""

    def __init__(self, where: str | None, message: str):
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where


class NodeResult(dict):
    """A node's result: a dict of fields whose str() is its text (so `{{ node }}` renders the text).
    No instance attributes (templates look `result.field` up as an item, `spec.jinja.make_env`)."""

    __slots__ = ()

    def __str__(self) -> str:
        return str(self.get("text", ""))


class Renderer:
    """Compiles each template/expression of a plan once and renders it with located errors."""

    def __init__(self, plan: Plan, count_tokens: Callable[[str, str], int] | None = None):
        """`count_tokens(text, model)`: the `token_count` filter (the model's tokenizer; policy by default)."""
        self.plan = plan
        self.env = make_env(item_types=(dict, NodeResult))
        if count_tokens is not None:
            self.env.filters["token_count"] = lambda value, model="policy": count_tokens(
                value if isinstance(value, str) else _as_text(value), model
            )
        self._cache: dict[tuple[str, str], Callable[[dict], Any]] = {}

    def _compiled(self, text: str, mode: str) -> Callable[[dict], Any]:
        key = (mode, text)
        fn = self._cache.get(key)
        if fn is None:
            fn = self._cache[key] = _fast(self.env, text, mode) or (
                compile_expression(self.env, text)
                if mode == "expr"
                else compile_template(self.env, text, native=(mode == "native"))
            )
        return fn

    def _run(self, path: tuple, text: str, mode: str, ctx: dict) -> Any:
        try:
            value = self._compiled(text, mode)(ctx)
            if isinstance(value, Undefined):
                value._fail_with_undefined_error()
            return value
        except UndefinedError as exc:
            raise RenderError(self.plan.span(*path), f"undefined value: {exc.message}") from None
        except TemplateError as exc:
            raise RenderError(self.plan.span(*path), f"template error: {exc}") from None
        except Exception as exc:  # an error inside an expression (e.g. int('x')) is data-dependent
            raise RenderError(self.plan.span(*path), f"{type(exc).__name__}: {exc}") from None

    def text(self, path: tuple, text: str, ctx: dict) -> str:
        return str(self._run(path, text, "text", ctx))

    def value(self, path: tuple, value: Any, ctx: dict) -> Any:
        """Render a (nested) value: strings are templates keeping native types; keys are rendered too."""
        if isinstance(value, str):
            return self._run(path, value, "native", ctx) if "{" in value else value
        if isinstance(value, dict):
            return {
                (self.text(path + (k,), k, ctx) if isinstance(k, str) and "{" in k else k): self.value(
                    path + (k,), v, ctx
                )
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.value(path + (i,), v, ctx) for i, v in enumerate(value)]
        return value

    def expr(self, path: tuple, text: str, ctx: dict) -> Any:
        return self._run(path, text, "expr", ctx)

    def expr_or_none(self, text: str, ctx: dict) -> Any:
        """The expression's value, or None where `expr` would raise (an undefined value, an error):
        an optional data-row field, absent from most rows, without the RenderError built and
        dropped per rollout (~20 us)."""
        try:
            value = self._compiled(text, "expr")(ctx)
        except Exception:  # what `_run` turns into a RenderError
            return None
        return None if isinstance(value, Undefined) else value


# `name` or `name.attr.attr`: the most common graph template by far ({{ problem }}, {{ output.text }})
_PATH = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*")
_LITERALS = frozenset({"true", "false", "none", "True", "False", "None"})
_MISSING = object()


def _path_lookup(expr: str, slow: Callable[[dict], Any], text: bool) -> Callable[[dict], Any] | None:
    """A plain variable or dotted path evaluated by dict lookups, exactly as Jinja does it: a name is
    the ctx value (ctx wins over globals); `.attr` on a dict (or NodeResult) whose type has no such
    attribute is the item. Anything else -- a missing name or key, another type, a globals name --
    goes to `slow` (the compiled Jinja), which gives the same value or raises the same error."""
    m = _PATH.fullmatch(expr)
    if m is None:
        return None
    head, *attrs = [part.strip() for part in m.group(1).split(".")]
    if head in _LITERALS or any(hasattr(dict, a) or hasattr(NodeResult, a) for a in attrs):
        return None

    def lookup(ctx: dict) -> Any:
        obj = ctx.get(head, _MISSING)
        if obj is _MISSING:
            return slow(ctx)
        for a in attrs:
            t = type(obj)
            if (t is dict or t is NodeResult) and a in obj:
                obj = obj[a]
            else:
                return slow(ctx)
        return (obj if type(obj) is str else str(obj)) if text else obj

    return lookup


def _fast(env: Any, text: str, mode: str) -> Callable[[dict], Any] | None:
    """The quickest exact evaluator of a template or expression: dict lookups for a plain path, else
    a Python function generated from its Jinja AST (`runtime.fastexpr`) that starts over in Jinja's code
    (`fn`) where it meets something outside its subset, else Jinja's code run on one merged dict."""
    fn = _fast_jinja(env, text, mode)
    if fn is None:
        return None
    if mode == "text":
        m = re.fullmatch(r"\{\{(.*)\}\}", text, re.S)  # exactly one output, no text around it
        path = _path_lookup(m.group(1), fn, text=True) if m else None
        return path or _with_fallback(fastexpr.compile_text(env, text), fn)
    m = _SINGLE_EXPR.match(text) if mode == "native" else None
    expr = m.group(1) if m else (text if mode == "expr" else None)
    if expr is None:  # a native-mode template with text around its outputs: rendered as text
        return _with_fallback(fastexpr.compile_text(env, text), fn)
    return _path_lookup(expr, fn, text=False) or _with_fallback(fastexpr.compile_expression(env, expr), fn)


def _with_fallback(fast: Callable[[dict], Any] | None, slow: Callable[[dict], Any]) -> Callable[[dict], Any]:
    if fast is None:
        return slow

    def run(ctx: dict) -> Any:
        try:
            return fast(ctx)
        except fastexpr.Fallback:
            return slow(ctx)

    return run


def _fast_jinja(env: Any, text: str, mode: str) -> Callable[[dict], Any] | None:
    """The same compiled template or expression, run on one merged dict (environment globals +
    ctx, Jinja's `shared` context) instead of the two or three copies `Template.render` and
    `TemplateExpression.__call__` make: a few dozen microseconds per graph template or condition,
    several per LLM call. Results are identical (ctx wins over globals, as in Jinja); None when this
    Jinja does not expose what it needs (then the public API is used)."""
    source = text
    if mode == "native":
        m = _SINGLE_EXPR.match(text)
        if m:
            try:
                env.compile_expression(m.group(1))
                source, mode = m.group(1), "expr"
            except TemplateSyntaxError:  # e.g. "{{ a }} text }}": not one expression after all
                pass
    try:
        tmpl = (
            env.compile_expression(source, undefined_to_none=False)._template
            if mode == "expr"
            else env.from_string(source)
        )
        new_context, root = tmpl.new_context, tmpl.root_render_func
    except AttributeError:
        return None
    g = dict(tmpl.globals)
    tmpl.globals = g  # a plain dict: each Context copies its keys (a ChainMap iterates in Python)
    if mode == "expr":

        def expr(ctx: dict) -> Any:
            context = new_context({**g, **ctx}, shared=True)
            for _ in root(context):
                pass
            return context.vars.get("result")

        return expr
    concat = env.concat
    return lambda ctx: concat(root(new_context({**g, **ctx}, shared=True)))


def cut(text: str, limit: int | None, where: str = "middle") -> str:
    """Shorten `text` to about `limit` characters, marking the cut."""
    if limit is None or len(text) <= limit:
        return text
    marker = f"\n...[{len(text) - limit} characters cut]...\n"
    if where == "end":
        return text[:limit] + marker
    if where == "start":
        return marker + text[-limit:]
    head = limit // 2
    return text[:head] + marker + text[len(text) - (limit - head) :]


def _cut_value(decl: StateVar, value: Any) -> Any:
    if decl.max_chars is None:
        return value
    if isinstance(value, str):
        return cut(value, decl.max_chars, decl.cut)
    if isinstance(value, dict):
        return {k: _cut_value(decl, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_value(decl, v) for v in value]
    return value


def merge_state(state: dict[str, Any], name: str, decl: StateVar, value: Any) -> None:
    """Apply one write to `state[name]` according to its declaration."""
    value = _cut_value(decl, value)
    if decl.merge == "overwrite":
        state[name] = value
        return
    if decl.merge == "append":
        items = list(state.get(name) or [])
        items.append(value)
    else:  # keyed
        if not isinstance(value, dict):
            raise TypeError(
                f"state '{name}' is keyed: an update must be a mapping {{key: value}}, got {type(value).__name__}"
            )
        merged = dict(state.get(name) or {})
        for k, v in value.items():
            merged.pop(k, None)
            merged[k] = v
        items = merged  # type: ignore[assignment]
    if decl.max_items is not None and len(items) > decl.max_items:
        items = items[-decl.max_items :] if isinstance(items, list) else dict(list(items.items())[-decl.max_items :])
    state[name] = items


def _as_text(value: Any) -> str:
    """A value `token_count` counts: messages by their contents, other lists item by item, else str()."""
    if isinstance(value, (list, tuple)):
        return "".join(_as_text(v.get("content", "") if isinstance(v, dict) else v) for v in value)
    return "" if value is None else str(value)
