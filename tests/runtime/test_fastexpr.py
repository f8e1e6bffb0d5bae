"""graphrl.runtime.fastexpr: graph expressions as closures give exactly what Jinja gives.

Differential: every expression is evaluated by the compiled closure (starting over in Jinja where it
raises Fallback, as the runtime does) and by Jinja's public API on the same sandboxed environment;
the values -- or the exceptions' types and messages -- must be equal. Hypothesis adds expressions
built at random from the subset's grammar.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphrl.runtime import fastexpr
from graphrl.runtime.scope import NodeResult, Renderer
from graphrl.spec.jinja import make_env

ENV = make_env(item_types=(dict, NodeResult))

CTX = {
    "output": NodeResult(
        text="<think>x</think> done",
        ok=True,
        calls=[{"name": "search", "arguments": {"model": "expert-1"}}],
    ),
    "failed": NodeResult(text="", ok=False, calls=[]),
    "row": {"metadata": {"model_mapping": {"expert-1": "Qwen/Qwen3-32B"}, "n": 3}},
    "role": "expert-1",
    "other": "expert-9",
    "counts": {"expert-1": 2},
    "items": [3, 1, 2],
    "empty": [],
    "n": 7,
    "f": 2.5,
    "s": "  Hello, World  ",
    "none": None,
    "flag": True,
    "visit": 1,
}

EXPRESSIONS = [
    "output.calls[0].name if output.ok and output.calls else ''",
    "output.calls[0].arguments.model | default('') if output.ok and output.calls else ''",
    "failed.calls[0].name if failed.ok and failed.calls else ''",
    "role in row.metadata.model_mapping",
    "other in row.metadata.model_mapping",
    "'search' if role in row.metadata.model_mapping else 'invalid'",
    "row.metadata.model_mapping[role] | default('')",
    "row.metadata.model_mapping[other] | default('')",
    "row.metadata.model_mapping[other]",
    "(counts[role] | default(0)) + 1",
    "(counts[other] | default(0)) + 1",
    "output.text.split('</think>')[-1] | trim",
    "s | trim | lower",
    "s.strip().upper()",
    "s[2:7]",
    "items[1:]",
    "items[::-1]",
    "items | length",
    "items | sort | first",
    "items | max",
    "empty | first",
    "n > 5 and n < 10",
    "1 < n < 10",
    "1 < n < 5",
    "n == 7 or missing",
    "missing or n",
    "missing",
    "missing.attr",
    "missing | default('d')",
    "missing is defined",
    "n is defined and n is number",
    "none is none",
    "not flag",
    "not missing",
    "-n + f * 2",
    "n // 2 ~ '/' ~ n % 2",
    "n / 0",
    "n ** 2",
    "'a' ~ n ~ none",
    "missing ~ n / 0",  # every operand of ~ is evaluated before any becomes text: the ZeroDivisionError
    "[n, f, 'x']",
    "(n, role)",
    "{'k': n, role: f}",
    "row.metadata.get('n')",
    "row.metadata.get('zz', 'fallback')",
    "row.metadata.keys() | list",
    "row.metadata.items() | list | length",
    "output.__class__",
    "row.__class__.__mro__",
    "items.append(4)",
    "s.format(1)",
    "range(3) | list",
    "dict(a=1)",
    "namespace(a=1).a",
    "items | map('string') | join(',')",
    "items | selectattr('x') | list",
    "s | replace('l', 'L') | wordcount",
    "n is divisibleby 7",
    "n if flag",
    "output.ok == true and visit == 1",
    "output.missing_field",
    "output.missing_field | default(none)",
    "output['text']",
    "output.text[0]",
    "output.text[100]",
    "n | string | int + 1",
    "'%s-%d' % (role, n)",
    "(items | sum) * 2",
    "items[n]",
    "role.split('-')[1] | int",
    "s | tojson",
]


def _outcome(fn):
    try:
        return ("value", fn())
    except fastexpr.Fallback:  # the caller starts over in Jinja
        raise
    except Exception as exc:  # compared by type and message
        return ("error", type(exc).__name__, str(exc))


def _fast_value(source: str, ctx: dict):
    fast = fastexpr.compile_expression(ENV, source)
    if fast is None:  # also when Jinja itself fails to compile it (its constant folding raised)
        return None
    try:
        return _outcome(lambda: fast(ctx))
    except fastexpr.Fallback:
        return _outcome(lambda: ENV.compile_expression(source, undefined_to_none=False)(**ctx))


def _jinja_value(source: str, ctx: dict):
    return _outcome(lambda: ENV.compile_expression(source, undefined_to_none=False)(**ctx))


def _rendered(outcome):
    """An Undefined value is compared by how it renders (str raises for StrictUndefined)."""
    if outcome and outcome[0] == "value":
        return _outcome(lambda: (type(outcome[1]).__name__, str(outcome[1])))
    return outcome


# outside the subset (the runtime keeps Jinja's code for them): an `if` without `else`, a context filter
_OUTSIDE = {"n if flag", "items | map('string') | join(',')", "items | selectattr('x') | list"}


@pytest.mark.parametrize("source", EXPRESSIONS)
def test_expression_gives_what_jinja_gives(source):
    fast = _fast_value(source, CTX)
    if fast is None:
        assert source in _OUTSIDE, source
        return
    assert _rendered(fast) == _rendered(_jinja_value(source, CTX))


def test_the_subset_covers_the_bundled_graphs_expressions():
    """The common forms compile (a test that could fail: a regression to None is visible here)."""
    for source in EXPRESSIONS[:12]:
        assert fastexpr.compile_expression(ENV, source) is not None, source


@pytest.mark.parametrize(
    "source",
    [
        "{{ output.text.split('</think>')[-1] | trim }}\n\nOutput of the code:\n{{ output.text }}",
        "{{ n + 1 }}",
        "{{ missing }}",
        "{{ none }} and {{ flag }}\n",
        "plain text only",
        "{{ items }} / {{ row.metadata }}",
        "{% if flag %}x{% endif %}",  # a block: outside the subset
        "{{ s.format(1) }}",
        "{{ none[1:] }}",
        "{{ none[1:] | default('d') }}",
        "{{ [3, 1] | sort }} {{ 'abc' | list }} {{ items | unique | list }}",
        "{{ s | wordwrap(5) }} {{ items | batch(2) | list }}",
        "{{ 'x' if flag }}",
    ],
)
@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # CPython compiling Jinja's code for `none[1:]`
def test_text_template_gives_what_jinja_gives(source):
    fast = fastexpr.compile_text(ENV, source)
    if fast is None:  # outside the subset: a block, an `if` without `else`
        assert "{%" in source or " if " in source and "else" not in source, source
        return

    def run():
        try:
            return fast(CTX)
        except fastexpr.Fallback:
            return ENV.from_string(source).render(CTX)

    assert _outcome(run) == _outcome(lambda: ENV.from_string(source).render(CTX))


def test_nothing_the_author_writes_becomes_code():
    """Names, attribute names, keys, strings and filters are values in the generated function's
    globals; its source holds only names the compiler made up, operators and keyword names."""
    source = "value.attr_q ~ 'STR_Q\\'); import os; (' ~ table['KEY_Q'] | replace('A', 'B') ~ (1 if flag_q else 2)"
    ctx = {"value": {"attr_q": "v"}, "table": {"KEY_Q": "AAk"}, "flag_q": True}
    fn = fastexpr.compile_expression(ENV, source)
    assert fn is not None
    generated = fn.__graphrl_source__
    for written in ("value", "attr_q", "STR_Q", "import", "table", "KEY_Q", "replace", "flag_q"):
        assert written not in generated, (written, generated)
    assert fn(ctx) == ENV.compile_expression(source)(**ctx) == "vSTR_Q'); import os; (BBk1"
    fn = fastexpr.compile_text(ENV, "{% for k in keys_q %}{{ loop.index }}={{ k.name_q }};{% endfor %}")
    assert fn is not None and "keys_q" not in fn.__graphrl_source__ and "name_q" not in fn.__graphrl_source__
    assert fn({"keys_q": [{"name_q": "a"}, {"name_q": "b"}]}) == "1=a;2=b;"


def test_a_folded_constant_container_is_new_at_each_evaluation():
    """Jinja folds `[1, [2]]` into one constant and its code writes it as a literal: each evaluation
    gives new containers, so a value put into state never aliases another evaluation's."""
    for source in ("[1, [2], {'k': [3]}]", "{'a': [1], 'b': (2, [3])}"):
        fn = fastexpr.compile_expression(ENV, source)
        assert fn is not None
        a, b = fn({}), fn({})
        assert a == b == ENV.compile_expression(source)()
        assert a is not b
        inner = (a[1], b[1]) if isinstance(a, list) else (a["b"][1], b["b"][1])
        assert inner[0] is not inner[1]


def test_renderer_uses_the_generated_functions_and_keeps_its_errors():
    """Through the runtime's Renderer: the same values, and located errors as before."""
    from graphrl.runtime.scope import RenderError

    class _PlanStandIn:
        def span(self, *path):
            return "graph.yaml:1:1"

    r = Renderer(_PlanStandIn())  # type: ignore[arg-type]
    assert r.expr(("x",), "(counts[role] | default(0)) + 1", CTX) == 3
    assert r.value(("x",), "{{ row.metadata.model_mapping[role] | default('') }}", CTX) == "Qwen/Qwen3-32B"
    assert r.text(("x",), "{{ n }}/{{ output.text.split('</think>')[-1] | trim }}", CTX) == "7/done"
    with pytest.raises(RenderError, match="graph.yaml:1:1: undefined value"):
        r.expr(("x",), "missing + 1", CTX)
    with pytest.raises(RenderError, match="unsafe"):
        r.expr(("x",), "items.append(4)", CTX)


# -- random expressions of the subset's grammar ------------------------------------------------------
_names = st.sampled_from(
    ["n", "f", "role", "other", "items", "empty", "flag", "missing", "s", "output", "row", "counts"]
)
_leaves = st.one_of(_names, st.sampled_from(["none", "1", "0", "'x'", "-2", "2.5", "true"]))
_OPS = ["+", "-", "*", "//", "%", "~", "==", "!=", "<", ">=", "in", "not in", "and", "or"]


def _extend(inner):
    # subscripts, slices and attributes apply to names: a literal's (`1[1:]`) is compiled by
    # CPython's own rules in Jinja's code (it may fold `not [1[1:], 1]` without evaluating the item)
    return st.one_of(
        st.tuples(inner, st.sampled_from(_OPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda x: f"(not {x})"),
        inner.map(lambda x: f"({x} | default('d'))"),
        inner.map(lambda x: f"({x} | length)"),
        inner.map(lambda x: f"({x} | join(','))"),  # an eval-context filter
        inner.map(lambda x: f"({x} | first)"),
        inner.map(lambda x: f"({x} is defined)"),
        st.tuples(_names, st.sampled_from(["text", "ok", "calls", "metadata", "upper", "keys", "x"])).map(
            lambda t: f"{t[0]}.{t[1]}"
        ),
        st.tuples(_names, inner).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        _names.map(lambda x: f"{x}[1:]"),
        inner.map(lambda x: f"[{x}, 1]"),
        inner.map(lambda x: f"{x} ~ ''"),
    )


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_leaves, _extend, max_leaves=6))
def test_random_expressions_give_what_jinja_gives(source):
    fast = _fast_value(source, CTX)
    if fast is None:  # every construct of this grammar is in the subset: Jinja must fail to compile it
        with pytest.raises(Exception):  # whatever its constant folding raised
            ENV.compile_expression(source)
        return
    assert _rendered(fast) == _rendered(_jinja_value(source, CTX))


# -- templates with blocks: `if` / `elif` / `else` and `for` -----------------------------------------
BLOCK_CTX = {
    **CTX,
    "msgs": [
        {"role": "system", "content": "s"},
        {"role": "tool", "content": "r1"},
        {"role": "user", "content": "u"},
        {"role": "tool", "content": "r2"},
    ],
    "memory": {"step 1": "a", "step 2": "b"},
    "pairs": [("x", 1), ("y", 2)],
    "triples": [(1, 2, 3)],
    "ragged": [("x", 1), ("y",)],
    "loop": {"index": 99},  # a foreach node's own `loop`: visible outside a template's for
}

BLOCK_TEMPLATES = [
    open_prompt := "Q: {{ s }}\n{% for m in msgs if m.role == 'tool' -%}\n[{{ loop.index }}] {{ m.content }}\n"
    "{% else -%}\n(none)\n{% endfor %}\nend",
    "{% for m in empty if m.role == 'tool' %}[{{ loop.index }}]{% else %}(none){% endfor %}",
    "{% for step, entry in memory.items() -%}\n{{ step }}: {{ entry }}\n{% endfor %}",
    "{% for a, b in pairs %}{{ a }}={{ b }}{% if not loop.first %}!{% endif %}{% endfor %}",
    "{% for a, b, c in triples %}{{ a + b + c }}{% endfor %}",
    "{% for a, b in ragged %}{{ a }}{% endfor %}",  # ValueError while unpacking, as in Jinja
    "{% for a, b in items %}{{ a }}{% endfor %}",  # TypeError: cannot unpack an int
    "{% for c in s %}{{ loop.index0 }}{{ c }}{% endfor %}",
    "{% for x in none %}{{ x }}{% endfor %}",  # None is not iterable
    "{% for x in missing %}{{ x }}{% else %}e{% endfor %}",  # iterating an undefined
    "{% for x in items %}{{ x }}{% endfor %}{{ x | default('gone') }}",  # the target does not leak
    "{{ loop.index }}{% for x in items %}{{ loop.index }}{% endfor %}{{ loop.index }}",
    "{% for x in items if x > missing %}{{ x }}{% endfor %}",
    "{% for x in items %}{{ x / (x - 1) }}{% endfor %}",  # ZeroDivisionError after some output
    "{% if flag %}a{% elif none %}b{% else %}c{% endif %}",
    "{% if none %}a{% elif n > 3 %}b{{ n }}{% else %}c{% endif %}",
    "{% if empty %}a{% endif %}-{% if missing %}b{% endif %}",  # truth of an undefined
    "{% if output.ok and output.calls %}{{ output.calls[0].name }}{% endif %}",
    "{% for m in msgs %}{% if m.role == 'tool' %}{{ m.content }}{% elif m.role == 'user' %}U{% endif %}{% endfor %}",
    # outside the subset: Jinja renders them
    "{% for x in items %}{{ loop.length }}{% endfor %}",
    "{% for x in items %}{{ loop.last }}{% endfor %}",
    "{% for x in items %}{{ loop }}{% endfor %}",
    "{% for x in items %}{% for y in items %}{{ y }}{% endfor %}{% endfor %}",
    "{% for x in items %}{{ x }}{% else %}{{ loop.index }}{% endfor %}",
    "{% set y = 1 %}{{ y }}",
    "{% for loop in items %}{{ loop }}{% endfor %}",
]
_BLOCK_OUTSIDE = set(BLOCK_TEMPLATES[-7:])


def _both(source: str, ctx: dict):
    fast = fastexpr.compile_text(ENV, source)

    def run():
        try:
            return fast(ctx)
        except fastexpr.Fallback:
            return ENV.from_string(source).render(ctx)

    jinja = _outcome(lambda: ENV.from_string(source).render(ctx))
    return fast, (_outcome(run) if fast is not None else jinja), jinja


@pytest.mark.parametrize("source", BLOCK_TEMPLATES)
def test_block_template_gives_what_jinja_gives(source):
    fast, got, want = _both(source, BLOCK_CTX)
    assert (fast is None) == (source in _BLOCK_OUTSIDE), source
    assert got == want


def test_the_bundled_prompt_files_with_blocks_compile():
    """Every bundled prompt file with a block renders through the closures (a regression to Jinja
    is visible here), with the text Jinja gives."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "prompts"
    files = [p for p in sorted(root.rglob("*.j2")) if "{%" in p.read_text(encoding="utf-8")]
    assert files
    for path in files:
        source = path.read_text(encoding="utf-8")
        assert fastexpr.compile_text(ENV, source) is not None, path


_stmt_leaf = st.one_of(
    st.sampled_from(["{{ x }}", "{{ n }}", "{{ loop.index }}", "{{ loop.first }}", "t", "\n", "{{ m.role }}"]),
    _names.map(lambda x: "{{ " + x + " }}"),
)


def _stmts(inner):
    return st.one_of(
        st.lists(inner, min_size=1, max_size=3).map("".join),
        st.tuples(st.sampled_from(["flag", "none", "n > 3", "missing", "empty", "x"]), inner, inner).map(
            lambda t: f"{{% if {t[0]} %}}{t[1]}{{% else %}}{t[2]}{{% endif %}}"
        ),
    )


_loops = st.tuples(
    st.sampled_from(["items", "empty", "msgs", "s", "missing", "none", "memory", "n"]),
    st.sampled_from(["", " if x", " if x.role == 'tool'", " if x > 1", " if missing"]),
    st.recursive(_stmt_leaf, _stmts, max_leaves=5),
    st.sampled_from(["", "{% else %}E{{ n }}"]),
).map(lambda t: f"A{{% for x in {t[0]}{t[1]} %}}{t[2]}{t[3]}{{% endfor %}}Z")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_loops)
def test_random_block_templates_give_what_jinja_gives(source):
    fast, got, want = _both(source, BLOCK_CTX)
    assert got == want, source
