"""Graph expressions compiled to Python source: a graph's conditions and `{{ expr }}` templates.

Input: the source of one Jinja expression, or of a template of text, `{{ expr }}` outputs and
`{% if %}` / `{% for %}` blocks, and the graph's sandboxed environment (`spec.jinja.make_env`).
Output: a callable ctx -> value (an expression's value; a template's text), or None when the
source uses anything outside the subset below -- then the caller keeps Jinja's compiled code.

Subset: names (the rollout's values, then the environment's globals, else Jinja's undefined),
constants, lists / tuples / dicts, `.attr` and `[item]` / `[a:b]` (through the environment's own
sandboxed getattr / getitem; a slice subscripts directly, as in Jinja), `x if c else y`, and / or / not, comparisons, arithmetic, `~`,
filters and tests that take no template context (`default`, `trim`, `length`, `join`, `is defined`, ...), and calls of
builtin methods (`text.split('x')`, `d.get(k)`), checked by the sandbox as Jinja checks them; in
templates, `if` / `elif` / `else` and a `for` (filtered, with `else`, one or several targets,
`loop.index` / `index0` / `first` -- `_Compiler._for` says what stays Jinja's). Any
other call found while evaluating (a Python function, a class) makes that evaluation start over in
Jinja's code (`Fallback`): expressions are pure in the immutable sandbox, so nothing is done twice.

Invariant: the value -- or the exception's type and message -- is what Jinja's compiled code gives
for the same source and values: each node does what Jinja's code generator emits for it (3.1:
`environment.getattr(obj, 'name')`, `environment.getitem(obj, key)`, plain Python operators since
the sandbox intercepts none, `environment.filters[name]([environment or eval_ctx,] value, ...)`), and tests compare the two
on every construct (tests/runtime/test_fastexpr.py), the bundled graphs' and random ones.

How: each expression or template becomes the source of one Python function `_fn(ctx)` (as Jinja
compiles a template to Python, without its `Context` machinery): the names it reads looked up once on
entry, then one Python expression, or statements appending to a list for a template with blocks.
The source holds only names the compiler made up and operators; every constant, attribute name,
filter and helper is a value in the function's globals, so nothing a graph author writes becomes
code. `fn.__graphrl_source__` is the generated text. `.attr` on the runtime's plain mapping types
(a dict, a node result) is their item inline when the type has no such attribute, as the sandbox's
getattr does. Why: six of these per LLM call in a tool-using graph cost about 12 us each through
Jinja's `Context` machinery, 1-3 us as the trees of closures this module built until commit 947d665,
0.2-3 us generated: 1.3-3.4x faster than the closures on ToolOrchestra's expressions (timeit),
and one code object per expression instead of one closure per AST node.
"""

from __future__ import annotations

import functools
import keyword
import types
from collections.abc import Callable
from typing import Any

from jinja2 import nodes
from jinja2.compiler import operators as _COMPARE  # Jinja's own table: 'eq' -> '==', ...
from jinja2.exceptions import TemplateSyntaxError
from jinja2.optimizer import Optimizer
from jinja2.parser import Parser
from jinja2.utils import _PassArg

Fn = Callable[[dict], Any]

_BUILTIN_METHODS = (types.BuiltinMethodType, types.MethodWrapperType)


class Fallback(Exception):
    """Raised inside an evaluation that met something outside the subset; the caller runs Jinja."""


class _Unsupported(Exception):
    """A construct outside the subset, found at compile time."""


def compile_expression(env: Any, source: str) -> Fn | None:
    """`source` (one expression) as a generated Python function, or None."""
    try:
        parser = Parser(env, source, state="variable")
        expr = parser.parse_expression()
        if not parser.stream.eos:
            return None
        c = _Compiler(env)
        value = c.expr(c.fold(expr))
        return c.function([f"return {value}"])
    except Exception:  # outside the subset, or an error while folding: Jinja's code gives the error
        return None


def compile_text(env: Any, source: str) -> Fn | None:
    """A template of text, `{{ expr }}` outputs and `{% if %}` / `{% for %}` blocks (see `_block`),
    rendering to its text; or None."""
    try:
        body = env.parse(source).body
    except TemplateSyntaxError:
        return None
    c = _Compiler(env)
    try:
        if len(body) == 1 and type(body[0]) is nodes.Output:
            parts = c.output_parts(body[0])
            if len(parts) == 1:
                return c.function([f"return {parts[0]}"])
            # a list display: each part evaluated and made a string before the next, as Jinja yields them
            return c.function([f"return ''.join([{', '.join(parts)}])"])
        lines = ["_out = []", "_w = _out.append", *c.block(body, 0), "return ''.join(_out)"]
        return c.function(lines)
    except Exception:  # as in compile_expression
        return None


class _Compiler:
    """Jinja AST -> the source of one Python function `ctx -> value`. The source holds only names it
    made up (`n0`, `_k3`, ...) and operators: every constant, attribute name, filter and helper is a
    value in the function's globals, so nothing from the template becomes code."""

    def __init__(self, env: Any):
        self.env = env
        self.globals = dict(env.globals)
        self.eval_ctx = nodes.EvalContext(env)
        self.ns: dict[str, Any] = {
            "_M": _MISSING,
            "_getattr": env.getattr,
            "_getitem": env.getitem,
            "_concat": _concat,
            "_call": _call,
            "_callable": _checked(env.is_safe_callable),
        }
        self.bound: dict[Any, str] = {}  # (type, value) or id(value) -> its name in ns (`bind`)
        self.names: dict[str, str] = {}  # a rollout name -> the local holding its value
        self.loop: dict[str, str] = {}  # inside a for body: its targets' locals (and `loop`: the counter)
        self.temps = 0  # walrus temporaries made (`_v0`, ...)
        # the mapping types whose `.name` is their item unless the type has such an attribute
        self.item_attrs: dict[type, frozenset[str]] = getattr(env, "_item_attrs", {})

    def fold(self, node: nodes.Node) -> nodes.Node:
        """Jinja's own constant folding (its code generator runs the optimizer on every expression):
        a constant subtree is the value Jinja computes at compile time, which is not always what
        evaluating it would give (`none[1:] | default('d')` folds to 'd')."""
        if not self.env.optimized:
            return node
        return Optimizer(self.env).visit(node, self.eval_ctx)

    def bind(self, value: Any, prefix: str = "k") -> str:
        """A name in the function's globals for `value`: one per string or tuple of types (a name, an
        attribute name, `_Getattr`'s mapping types), one per object otherwise (not by equality: 0.0
        and -0.0 are equal constants that render differently)."""
        key: Any = (type(value), value) if type(value) in (str, tuple) else id(value)
        name = self.bound.get(key)
        if name is None:
            name = self.bound[key] = f"_{prefix}{len(self.ns)}"
            self.ns[name] = value
        return name

    def function(self, body: list[str]) -> Fn:
        """The function: the names it reads looked up once on entry (ctx first, then the environment's
        globals, else an undefined value: pure lookups, as Jinja's own generated code resolves a
        template's names first), then `body`."""
        head = []
        for name, local in self.names.items():
            key = self.bind(name)
            if name in self.globals:
                head.append(f"{local} = ctx.get({key}, {self.bind(self.globals[name])})")
            else:
                undefined = self.bind(functools.partial(self.env.undefined, name=name), "u")
                head.append(f"{local} = ctx.get({key}, _M)")
                head.append(f"if {local} is _M: {local} = {undefined}()")
        text = "def _fn(ctx):\n" + "".join(f"    {line}\n" for line in head + body)
        exec(compile(text, "<graphrl expression>", "exec"), self.ns)  # a fixed name: profilers class it
        fn = self.ns["_fn"]
        fn.__graphrl_source__ = text  # what was generated, for reading and for the tests
        return fn

    # -- template bodies: statements appending to `_out` (`_w`) in Jinja's order ----------------------
    def output_parts(self, node: nodes.Output) -> list[str]:
        return [
            self.bind(child.data) if type(child) is nodes.TemplateData else f"str({self.expr(self.fold(child))})"
            for child in node.nodes
        ]

    def block(self, body: list[nodes.Node], depth: int) -> list[str]:
        """Output, `if` / `elif` / `else` and (not nested) `for` statements; anything else (`set`,
        macros, `include`, filters blocks, ...) is outside the subset."""
        pad = "    " * depth
        lines: list[str] = []
        for node in body:
            kind = type(node)  # exact types (isinstance only narrows them for the type checker)
            if kind is nodes.Output and isinstance(node, nodes.Output):
                # Jinja yields each child in turn: str() before the next is evaluated
                lines += [f"{pad}_w({part})" for part in self.output_parts(node)]
            elif kind is nodes.If and isinstance(node, nodes.If):
                # Python truth, as Jinja's `if <test>:` (an undefined raises there)
                branches = [(node.test, node.body), *((b.test, b.body) for b in node.elif_)]
                for i, (test, part) in enumerate(branches):
                    lines.append(f"{pad}{'if' if i == 0 else 'elif'} {self.expr(self.fold(test))}:")
                    lines += self.block(part, depth + 1) or [f"{pad}    pass"]
                if node.else_:
                    lines.append(f"{pad}else:")
                    lines += self.block(node.else_, depth + 1) or [f"{pad}    pass"]
            elif kind is nodes.For and isinstance(node, nodes.For):
                lines += self._for(node, depth)
            else:
                raise _Unsupported(kind.__name__)
        return lines

    def _for(self, node: nodes.For, depth: int) -> list[str]:
        """`{% for x in items [if test] %}...{% else %}...{% endfor %}` as Jinja runs it: items
        filtered lazily, the else part when none passed, the target a name or names (unpacked by
        Python's own `for a, b in`, with its errors), and in the body `loop.index`, `loop.index0`
        and `loop.first` (the attributes that need no look ahead); other uses of `loop`, recursive
        and nested loops are outside the subset."""
        if node.recursive or any(True for _ in node.find_all(nodes.For)):
            raise _Unsupported("a recursive or nested for")
        target = node.target
        if type(target) is nodes.Name:
            names: tuple[str, ...] = (target.name,)
        elif (
            type(target) is nodes.Tuple
            and len(target.items) in (2, 3)
            and all(type(t) is nodes.Name for t in target.items)
        ):
            names = tuple(t.name for t in target.items if isinstance(t, nodes.Name))
        else:
            raise _Unsupported("for target")
        if "loop" in names:
            raise _Unsupported("a for target named loop")
        outside = [node.iter, *([node.test] if node.test is not None else []), *node.else_]
        if any(n.name == "loop" for part in outside for n in part.find_all(nodes.Name)):
            raise _Unsupported("loop outside the loop body")
        uses = [n for part in node.body for n in part.find_all(nodes.Name) if n.name == "loop"]
        read = [
            g
            for part in node.body
            for g in part.find_all(nodes.Getattr)
            if type(g.node) is nodes.Name and g.node.name == "loop"
        ]
        if len(read) != len(uses) or any(g.attr not in ("index", "index0", "first") for g in read):
            raise _Unsupported("loop attribute")
        pad = "    " * depth
        items = self.expr(self.fold(node.iter))  # read outside the loop's names
        otherwise = self.block(node.else_, depth + 1)
        targets = [f"t{i}" for i in range(len(names))]
        self.loop = {**dict(zip(names, targets)), "loop": "_i"}  # the loop's names shadow the rollout's, there only
        try:
            test = self.expr(self.fold(node.test)) if node.test is not None else None
            body = self.block(node.body, depth + 1)
        finally:
            self.loop = {}
        lines = [f"{pad}_i = 0", f"{pad}for {', '.join(targets)} in {items}:"]
        if test is not None:
            lines.append(f"{pad}    if not {test}: continue")
        lines += body
        lines.append(f"{pad}    _i += 1")
        if otherwise:
            lines += [f"{pad}if not _i:", *otherwise]
        return lines

    # -- expressions: Python source, every subexpression parenthesised --------------------------------
    def expr(self, node: nodes.Node) -> str:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise _Unsupported(type(node).__name__)
        return method(node)

    def _Name(self, node: nodes.Name) -> str:
        if node.ctx != "load":
            raise _Unsupported("store")
        local = self.loop.get(node.name)
        if local is not None:
            if node.name == "loop":  # only as loop.index / index0 / first (checked in _for)
                raise _Unsupported("bare loop")
            return local
        local = self.names.get(node.name)
        if local is None:
            local = self.names[node.name] = f"n{len(self.names)}"
        return local

    def _Const(self, node: nodes.Const) -> str:
        return self.const(node.value)

    def const(self, value: Any) -> str:
        """A constant; a list, dict or set (Jinja folds `[1, 2]` into one) built afresh at each
        evaluation, as Jinja's code writes it as a literal: no two results share a container."""
        kind = type(value)
        if kind is list:
            return f"[{', '.join(self.const(x) for x in value)}]"
        if kind is tuple:
            return f"({''.join(self.const(x) + ', ' for x in value)})"
        if kind is dict:
            return "{" + ", ".join(f"{self.const(k)}: {self.const(v)}" for k, v in value.items()) + "}"
        if kind is set:
            return f"{{{', '.join(self.const(x) for x in value)}}}" if value else "set()"
        return self.bind(value)

    def _List(self, node: nodes.List) -> str:
        return f"[{', '.join(self.expr(x) for x in node.items)}]"

    def _Tuple(self, node: nodes.Tuple) -> str:
        if node.ctx != "load":
            raise _Unsupported("store")
        return f"({''.join(self.expr(x) + ', ' for x in node.items)})"

    def _Dict(self, node: nodes.Dict) -> str:  # a dict display: each key, then its value, in order
        return "{" + ", ".join(f"{self.expr(p.key)}: {self.expr(p.value)}" for p in node.items) + "}"

    def _Getattr(self, node: nodes.Getattr) -> str:
        if self.loop and type(node.node) is nodes.Name and node.node.name == "loop":
            return {"index": "(_i + 1)", "index0": "_i", "first": "(_i == 0)"}[node.attr]
        obj, attr = self.expr(node.node), self.bind(node.attr)
        item_types = [t for t, names in self.item_attrs.items() if node.attr not in names]
        if not item_types:
            return f"_getattr({obj}, {attr})"
        # the sandbox's getattr on a plain mapping type without such an attribute, inline: its item
        v = f"_v{self.temps}"
        self.temps += 1
        types_ = self.bind(tuple(item_types))
        return f"({v}[{attr}] if type({v} := {obj}) in {types_} and {attr} in {v} else _getattr({v}, {attr}))"

    def _Getitem(self, node: nodes.Getitem) -> str:
        obj = self.expr(node.node)
        if type(node.arg) is nodes.Slice:  # Jinja subscripts a slice directly, not through getitem
            s = node.arg
            parts = ["" if x is None else self.expr(x) for x in (s.start, s.stop, s.step)]
            return f"{obj}[{parts[0]}:{parts[1]}:{parts[2]}]"
        return f"_getitem({obj}, {self.expr(node.arg)})"

    def _CondExpr(self, node: nodes.CondExpr) -> str:
        if node.expr2 is None:  # Jinja's "no else section" undefined: left to Jinja
            raise _Unsupported("if without else")
        return f"({self.expr(node.expr1)} if {self.expr(node.test)} else {self.expr(node.expr2)})"

    def _And(self, node: nodes.And) -> str:
        return f"({self.expr(node.left)} and {self.expr(node.right)})"

    def _Or(self, node: nodes.Or) -> str:
        return f"({self.expr(node.left)} or {self.expr(node.right)})"

    def _Not(self, node: nodes.Not) -> str:
        return f"(not {self.expr(node.node)})"

    def _unary(self, node: nodes.UnaryExpr) -> str:
        if node.operator in self.env.intercepted_unops:
            raise _Unsupported("intercepted")
        return f"({node.operator}{self.expr(node.node)})"

    _Neg = _Pos = _unary

    def _binary(self, node: nodes.BinExpr) -> str:
        if node.operator in self.env.intercepted_binops:
            raise _Unsupported("intercepted")
        return f"({self.expr(node.left)} {node.operator} {self.expr(node.right)})"

    _Add = _Sub = _Mul = _Div = _FloorDiv = _Mod = _Pow = _binary

    def _Concat(self, node: nodes.Concat) -> str:
        # Jinja's str_join((a, b, ...)): every operand evaluated before any is made a string
        return f"_concat({', '.join(self.expr(x) for x in node.nodes)})"

    def _Compare(self, node: nodes.Compare) -> str:
        # Python's chained comparison, as Jinja emits it: each middle operand evaluated once
        return "(" + self.expr(node.expr) + "".join(f" {_COMPARE[o.op]} {self.expr(o.expr)}" for o in node.ops) + ")"

    def _args(self, node: nodes.Filter | nodes.Test | nodes.Call) -> str:
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            raise _Unsupported("*args")
        args = [self.expr(a) for a in node.args]
        for k in node.kwargs:
            if not str(k.key).isidentifier() or keyword.iskeyword(str(k.key)):
                raise _Unsupported("keyword")
            args.append(f"{k.key}={self.expr(k.value)}")
        return "".join(", " + a for a in args)

    def _applied(self, table: dict[str, Any], node: nodes.Filter | nodes.Test, value: str) -> str:
        fn = table.get(node.name)
        if fn is None:
            raise _Unsupported(node.name)
        pass_arg = _PassArg.from_obj(fn)
        first = ""
        if pass_arg is _PassArg.environment or pass_arg is _PassArg.eval_context:
            # what Jinja passes: the environment, or its evaluation context (a fresh one per render,
            # never changed inside an expression: autoescape off, not volatile)
            first = self.bind(self.env if pass_arg is _PassArg.environment else self.eval_ctx) + ", "
        elif pass_arg is not None:  # a context filter: left to Jinja
            raise _Unsupported(node.name)
        return f"{self.bind(fn, 'f')}({first}{value}{self._args(node)})"

    def _Filter(self, node: nodes.Filter) -> str:
        if node.node is None:  # a filter block's input
            raise _Unsupported("filter block")
        return self._applied(self.env.filters, node, self.expr(node.node))

    def _Test(self, node: nodes.Test) -> str:
        return self._applied(self.env.tests, node, self.expr(node.node))

    def _Call(self, node: nodes.Call) -> str:
        # the callee checked before any argument is evaluated (a function, a class, an undefined, a
        # refused callable: Fallback, and Jinja decides)
        return f"_call(_callable({self.expr(node.node)}){self._args(node)})"


_MISSING = object()


def _concat(*values: Any) -> str:
    return "".join([str(v) for v in values])


def _checked(safe: Callable[[Any], bool]) -> Callable[[Any], Any]:
    def callable_(fn: Any) -> Any:
        if not isinstance(fn, _BUILTIN_METHODS) or not safe(fn):
            raise Fallback
        return fn

    return callable_


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except StopIteration:  # Jinja turns it into an undefined value
        raise Fallback from None
