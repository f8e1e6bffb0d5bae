"""The one expression language: Jinja templates and bare Jinja expressions.

Input: template or expression source text. Output: parsed ASTs (for checks), compiled callables
(for the runtime), and the set of free variable names and attribute references they use.

Invariants: undefined names raise (StrictUndefined) instead of rendering as empty strings; values
passed in (model output included) are data — Jinja never evaluates text that arrives through a
variable; a whole-string `{{ expr }}` keeps its native Python type when `native=True`.
Graph templates run in Jinja's immutable sandbox: no attribute or item starting with `_`
(`__globals__`, `__class__`, ...), no `str.format` escape, no mutation of the values passed in;
a template cannot reach Python. `unsafe_refs` finds such routes statically for `graphrl check`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, StrictUndefined, meta, nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

_SINGLE_EXPR = re.compile(r"^\s*\{\{(?!.*\{\{)(.*)\}\}\s*$", re.S)


class _GraphSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, refusing an unsafe lookup at once: Jinja's own returns an undefined
    value that renders as `Undefined` inside a list (`[x]|map(attribute='__class__')|list`)."""

    def __init__(self, *args: Any, item_types: tuple[type, ...], **kwargs: Any):
        super().__init__(*args, **kwargs)
        # `value.name` on these mapping types (no instance attributes, no __getattr__) is the item
        # unless the type has an attribute of that name: their attribute names, listed once per type
        self._item_attrs = {t: frozenset(dir(t)) for t in item_types}

    def getattr(self, obj: Any, attribute: str) -> Any:
        """Jinja's sandboxed `obj.attribute`, with the answer for a plain mapping's key computed
        without raising and catching an AttributeError first: the same value or undefined."""
        names = self._item_attrs.get(type(obj))
        if names is not None and attribute not in names:
            try:
                return obj[attribute]
            except (TypeError, LookupError):
                return self.undefined(obj=obj, name=attribute)
        return super().getattr(obj, attribute)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} value is unsafe")


def make_env(item_types: tuple[type, ...] = (dict,)) -> Environment:
    """The environment of graph templates and expressions: sandboxed, strict about undefined names.
    `item_types`: mapping types without instance attributes whose `.name` is looked up as an item
    directly (the runtime adds its node results)."""
    env = _GraphSandbox(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False, item_types=item_types)
    env.filters["snake"] = lambda s: re.sub(r"[^0-9a-z]+", "_", str(s).lower()).strip("_")
    env.filters["token_count"] = _no_tokenizer  # the runtime's Renderer binds the model's tokenizer
    return env


def _no_tokenizer(value: Any, model: str = "policy") -> int:
    raise RuntimeError("token_count needs a tokenizer: it is only available while a graph runs")


@dataclass(frozen=True)
class Parsed:
    ast: nodes.Template
    free: frozenset[str]


def parse_template(env: Environment, source: str) -> Parsed:
    """Raises TemplateSyntaxError with a 1-based lineno relative to `source`."""
    ast = env.parse(source)
    return Parsed(ast, frozenset(meta.find_undeclared_variables(ast)))


def parse_expression(env: Environment, source: str) -> Parsed:
    parser = Parser(env, source, state="variable")
    expr = parser.parse_expression()
    if not parser.stream.eos:
        tok = parser.stream.current
        raise TemplateSyntaxError(f"unexpected '{tok.value}' after the expression", tok.lineno)
    ast = nodes.Template([nodes.Output([expr])], lineno=1)
    ast.set_environment(env)
    return Parsed(ast, frozenset(meta.find_undeclared_variables(ast)))


def attribute_refs(ast: nodes.Node) -> list[tuple[str, str, int]]:
    """(variable, attribute, lineno) for every `var.attr` and `var['attr']` in the AST, except on
    names the template binds itself (loop variables, {% set %})."""
    out = []
    bound = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        assert isinstance(node, (nodes.Getattr, nodes.Getitem))
        if isinstance(node.node, nodes.Name) and node.node.name not in bound:
            if isinstance(node, nodes.Getattr):
                out.append((node.node.name, node.attr, node.lineno))
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                out.append((node.node.name, node.arg.value, node.lineno))
    return out


_UNSAFE_METHODS = frozenset({"format", "format_map", "mro"})


# filters that look an attribute up by a name given as text (dotted paths allowed)
_ATTRIBUTE_FILTERS = frozenset({"map", "selectattr", "rejectattr", "sort", "groupby", "sum", "unique", "min", "max"})


def unsafe_refs(ast: nodes.Node) -> list[tuple[str, int]]:
    """(what, lineno) for each route out of the sandbox visible in the AST: an attribute or a constant
    item key starting with `_`, `.format` / `.format_map` / `.mro`, and the `attr` filter. The sandbox
    refuses them at run time anyway; `graphrl check` reports them before any GPU is booked."""
    out = []
    for node in ast.find_all((nodes.Getattr, nodes.Getitem, nodes.Filter)):
        if isinstance(node, nodes.Getattr):
            if node.attr.startswith("_") or node.attr in _UNSAFE_METHODS:
                out.append((f".{node.attr}", node.lineno))
        elif isinstance(node, nodes.Getitem):
            if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str) and node.arg.value.startswith("_"):
                out.append((f"[{node.arg.value!r}]", node.lineno))
        elif isinstance(node, nodes.Filter) and node.name == "attr":
            out.append(("|attr", node.lineno))
        elif isinstance(node, nodes.Filter) and node.name in _ATTRIBUTE_FILTERS:
            named = [kw.value for kw in node.kwargs if kw.key == "attribute"]
            for arg in [*named, *node.args[:1]]:  # map(attribute='x.__class__'), selectattr('__class__')
                if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
                    if any(part.startswith("_") for part in arg.value.split(".")):
                        out.append((f"|{node.name}({arg.value!r})", node.lineno))
    return out


def compile_template(env: Environment, source: str, *, native: bool = False) -> Callable[[dict], Any]:
    """A render function. With native=True a lone `{{ expr }}` returns the expression's value."""
    if native:
        m = _SINGLE_EXPR.match(source)
        if m:
            try:
                return compile_expression(env, m.group(1))
            except TemplateSyntaxError:  # e.g. "{{ a }} text }}": not one expression after all
                pass
    tmpl = env.from_string(source)
    return tmpl.render


def compile_expression(env: Environment, source: str) -> Callable[[dict], Any]:
    fn = env.compile_expression(source, undefined_to_none=False)
    return lambda ctx: fn(**ctx)
