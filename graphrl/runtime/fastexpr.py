"""Graph expressions compiled to Python closures: a graph's conditions and `{{ expr }}` templates.

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
on every construct (tests/runtime/test_fastexpr.py). Why: six of these per LLM call in a tool-using
graph cost about 12 us each through Jinja's `Context` machinery, 1-3 us as closures.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError
from jinja2.optimizer import Optimizer
from jinja2.parser import Parser
from jinja2.utils import _PassArg

Fn = Callable[[dict], Any]

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    nodes.Add: operator.add,
    nodes.Sub: operator.sub,
    nodes.Mul: operator.mul,
    nodes.Div: operator.truediv,
    nodes.FloorDiv: operator.floordiv,
    nodes.Mod: operator.mod,
    nodes.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {nodes.Neg: operator.neg, nodes.Pos: operator.pos}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gteq": operator.ge,
    "lt": operator.lt,
    "lteq": operator.le,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
_BUILTIN_METHODS = (types.BuiltinMethodType, types.MethodWrapperType)


class Fallback(Exception):
    """Raised inside an evaluation that met something outside the subset; the caller runs Jinja."""


class _Unsupported(Exception):
    """A construct outside the subset, found at compile time."""


def compile_expression(env: Any, source: str) -> Fn | None:
    """`source` (one expression) as a closure, or None."""
    try:
        parser = Parser(env, source, state="variable")
        expr = parser.parse_expression()
        if not parser.stream.eos:
            return None
        c = _Compiler(env)
        return c.expr(c.fold(expr))
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
    if len(body) == 1 and type(body[0]) is nodes.Output:
        try:
            parts = c.output_parts(body[0])
        except Exception:  # as in compile_expression
            return None
        if len(parts) == 1 and not isinstance(parts[0], str):
            one = parts[0]
            return lambda ctx: str(one(ctx))
        return lambda ctx: "".join([p if isinstance(p, str) else str(p(ctx)) for p in parts])
    try:
        emit = c.block(body)
    except Exception:
        return None

    def render(ctx: dict) -> str:
        out: list[str] = []
        emit(ctx, out)
        return "".join(out)

    return render


class _Compiler:
    def __init__(self, env: Any):
        self.env = env
        self.globals = dict(env.globals)
        self.eval_ctx = nodes.EvalContext(env)

    def fold(self, node: nodes.Node) -> nodes.Node:
        """Jinja's own constant folding (its code generator runs the optimizer on every expression):
        a constant subtree is the value Jinja computes at compile time, which is not always what
        evaluating it would give (`none[1:] | default('d')` folds to 'd')."""
        if not self.env.optimized:
            return node
        return Optimizer(self.env).visit(node, self.eval_ctx)

    # -- template bodies: statements writing into a list of strings, in Jinja's order ------------------
    def output_parts(self, node: nodes.Output) -> list[str | Fn]:
        return [
            child.data if type(child) is nodes.TemplateData else self.expr(self.fold(child)) for child in node.nodes
        ]

    def block(self, body: list[nodes.Node]) -> Callable[[dict, list[str]], None]:
        """Output, `if` / `elif` / `else` and (not nested) `for` statements; anything else (`set`,
        macros, `include`, filters blocks, ...) is outside the subset."""
        steps = [self._statement(node) for node in body]

        def run(ctx: dict, out: list[str]) -> None:
            for step in steps:
                step(ctx, out)

        return run

    def _statement(self, node: nodes.Node) -> Callable[[dict, list[str]], None]:
        kind = type(node)  # exact types (isinstance only narrows them for the type checker)
        if kind is nodes.Output and isinstance(node, nodes.Output):
            parts = self.output_parts(node)

            def output(ctx: dict, out: list[str]) -> None:
                for p in parts:  # Jinja yields each child in turn: str() before the next is evaluated
                    out.append(p if isinstance(p, str) else str(p(ctx)))

            return output
        if kind is nodes.If and isinstance(node, nodes.If):
            branches = [(self.expr(self.fold(node.test)), self.block(node.body))]
            branches += [(self.expr(self.fold(b.test)), self.block(b.body)) for b in node.elif_]
            otherwise = self.block(node.else_)

            def if_(ctx: dict, out: list[str]) -> None:
                for test, body in branches:
                    if test(ctx):  # Python truth, as Jinja's `if <test>:` (an undefined raises there)
                        body(ctx, out)
                        return
                otherwise(ctx, out)

            return if_
        if kind is nodes.For and isinstance(node, nodes.For):
            return self._for(node)
        raise _Unsupported(kind.__name__)

    def _for(self, node: nodes.For) -> Callable[[dict, list[str]], None]:
        """`{% for x in items [if test] %}...{% else %}...{% endfor %}` as Jinja runs it: items
        filtered lazily, the else part when none passed, the target a name or names (unpacked), and
        in the body `loop.index`, `loop.index0` and `loop.first` (the attributes that need no look
        ahead); other uses of `loop`, recursive and nested loops are outside the subset."""
        if node.recursive or any(True for _ in node.find_all(nodes.For)):
            raise _Unsupported("a recursive or nested for")
        target = node.target
        if type(target) is nodes.Name:
            names: tuple[str, ...] = (target.name,)
        elif (
            type(target) is nodes.Tuple
            and len(target.items) in _UNPACK
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
        with_loop = bool(uses)
        items_of = self.expr(self.fold(node.iter))
        test = self.expr(self.fold(node.test)) if node.test is not None else None
        body, otherwise = self.block(node.body), self.block(node.else_)
        one = names[0] if len(names) == 1 else None
        unpack = _UNPACK.get(len(names))

        def for_(ctx: dict, out: list[str]) -> None:
            local = dict(ctx)  # the loop's names shadow the context's inside it, and only there
            i = 0
            for item in items_of(ctx):
                if one is not None:
                    local[one] = item
                else:
                    local.update(zip(names, unpack(item)))  # type: ignore[misc]
                if test is not None and not test(local):
                    continue
                if with_loop:
                    local["loop"] = {"index": i + 1, "index0": i, "first": i == 0}
                body(local, out)
                i += 1
            if not i:
                otherwise(ctx, out)

        return for_

    def expr(self, node: nodes.Node) -> Fn:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise _Unsupported(type(node).__name__)
        return method(node)

    def _Name(self, node: nodes.Name) -> Fn:
        if node.ctx != "load":
            raise _Unsupported("store")
        name, g, undefined, missing = node.name, self.globals, self.env.undefined, _MISSING

        def lookup(ctx: dict) -> Any:
            value = ctx.get(name, missing)
            if value is missing:
                value = g.get(name, missing)
                if value is missing:
                    return undefined(name=name)
            return value

        return lookup

    def _Const(self, node: nodes.Const) -> Fn:
        value = node.value
        return lambda ctx: value

    def _List(self, node: nodes.List) -> Fn:
        items = [self.expr(x) for x in node.items]
        return lambda ctx: [f(ctx) for f in items]

    def _Tuple(self, node: nodes.Tuple) -> Fn:
        if node.ctx != "load":
            raise _Unsupported("store")
        items = [self.expr(x) for x in node.items]
        return lambda ctx: tuple([f(ctx) for f in items])

    def _Dict(self, node: nodes.Dict) -> Fn:
        pairs = [(self.expr(p.key), self.expr(p.value)) for p in node.items]
        return lambda ctx: {k(ctx): v(ctx) for k, v in pairs}

    def _Getattr(self, node: nodes.Getattr) -> Fn:
        obj, attr, getattr_ = self.expr(node.node), node.attr, self.env.getattr
        return lambda ctx: getattr_(obj(ctx), attr)

    def _Getitem(self, node: nodes.Getitem) -> Fn:
        obj = self.expr(node.node)
        if type(node.arg) is nodes.Slice:  # Jinja subscripts a slice directly, not through getitem
            s = node.arg
            parts = [None if x is None else self.expr(x) for x in (s.start, s.stop, s.step)]
            return lambda ctx: obj(ctx)[slice(*[None if f is None else f(ctx) for f in parts])]
        key, getitem = self.expr(node.arg), self.env.getitem
        return lambda ctx: getitem(obj(ctx), key(ctx))

    def _CondExpr(self, node: nodes.CondExpr) -> Fn:
        if node.expr2 is None:  # Jinja's "no else section" undefined: left to Jinja
            raise _Unsupported("if without else")
        test, yes, no = self.expr(node.test), self.expr(node.expr1), self.expr(node.expr2)
        return lambda ctx: yes(ctx) if test(ctx) else no(ctx)

    def _And(self, node: nodes.And) -> Fn:
        left, right = self.expr(node.left), self.expr(node.right)
        return lambda ctx: left(ctx) and right(ctx)

    def _Or(self, node: nodes.Or) -> Fn:
        left, right = self.expr(node.left), self.expr(node.right)
        return lambda ctx: left(ctx) or right(ctx)

    def _Not(self, node: nodes.Not) -> Fn:
        inner = self.expr(node.node)
        return lambda ctx: not inner(ctx)

    def _unary(self, node: nodes.UnaryExpr) -> Fn:
        if node.operator in self.env.intercepted_unops:
            raise _Unsupported("intercepted")
        inner, op = self.expr(node.node), _UNARY[type(node)]
        return lambda ctx: op(inner(ctx))

    _Neg = _Pos = _unary

    def _binary(self, node: nodes.BinExpr) -> Fn:
        if node.operator in self.env.intercepted_binops:
            raise _Unsupported("intercepted")
        left, right, op = self.expr(node.left), self.expr(node.right), _BINARY[type(node)]
        return lambda ctx: op(left(ctx), right(ctx))

    _Add = _Sub = _Mul = _Div = _FloorDiv = _Mod = _Pow = _binary

    def _Concat(self, node: nodes.Concat) -> Fn:
        items = [self.expr(x) for x in node.nodes]
        # Jinja's str_join((a, b, ...)): every operand evaluated before any is made a string
        return lambda ctx: "".join([str(v) for v in [f(ctx) for f in items]])

    def _Compare(self, node: nodes.Compare) -> Fn:
        first = self.expr(node.expr)
        ops = [(_COMPARE[o.op], self.expr(o.expr)) for o in node.ops]
        if len(ops) == 1:
            ((op, right),) = ops
            return lambda ctx: op(first(ctx), right(ctx))

        def chain(ctx: dict) -> Any:  # Python's chained comparison: each middle operand once
            left, result = first(ctx), True
            for op, f in ops:
                right = f(ctx)
                result = op(left, right)
                if not result:
                    return result
                left = right
            return result

        return chain

    def _args(self, node: nodes.Filter | nodes.Test | nodes.Call) -> tuple[list[Fn], list[tuple[str, Fn]]]:
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            raise _Unsupported("*args")
        return [self.expr(a) for a in node.args], [(str(k.key), self.expr(k.value)) for k in node.kwargs]

    def _applied(self, table: dict[str, Any], node: nodes.Filter | nodes.Test, value: Fn) -> Fn:
        fn = table.get(node.name)
        if fn is None:
            raise _Unsupported(node.name)
        pass_arg = _PassArg.from_obj(fn)
        if pass_arg is _PassArg.environment or pass_arg is _PassArg.eval_context:
            # what Jinja passes: the environment, or its evaluation context (a fresh one per render,
            # never changed inside an expression: autoescape off, not volatile)
            first, inner = self.env if pass_arg is _PassArg.environment else self.eval_ctx, fn
            fn = lambda v, *a, **k: inner(first, v, *a, **k)
        elif pass_arg is not None:  # a context filter: left to Jinja
            raise _Unsupported(node.name)
        args, kwargs = self._args(node)
        if not args and not kwargs:
            return lambda ctx: fn(value(ctx))
        return lambda ctx: fn(value(ctx), *[a(ctx) for a in args], **{k: f(ctx) for k, f in kwargs})

    def _Filter(self, node: nodes.Filter) -> Fn:
        if node.node is None:  # a filter block's input
            raise _Unsupported("filter block")
        return self._applied(self.env.filters, node, self.expr(node.node))

    def _Test(self, node: nodes.Test) -> Fn:
        return self._applied(self.env.tests, node, self.expr(node.node))

    def _Call(self, node: nodes.Call) -> Fn:
        target = self.expr(node.node)
        args, kwargs = self._args(node)
        safe = self.env.is_safe_callable

        def call(ctx: dict) -> Any:
            fn = target(ctx)
            if not isinstance(fn, _BUILTIN_METHODS) or not safe(fn):
                raise Fallback  # a function, a class, an undefined, a refused callable: Jinja decides
            try:
                return fn(*[a(ctx) for a in args], **{k: f(ctx) for k, f in kwargs})
            except StopIteration:  # Jinja turns it into an undefined value
                raise Fallback from None

        return call


_MISSING = object()


def _unpack2(item: Any) -> tuple[Any, Any]:
    a, b = item  # Python's own unpacking and errors: what Jinja's generated `for (a, b) in ...` does
    return a, b


def _unpack3(item: Any) -> tuple[Any, Any, Any]:
    a, b, c = item
    return a, b, c


_UNPACK = {2: _unpack2, 3: _unpack3}
