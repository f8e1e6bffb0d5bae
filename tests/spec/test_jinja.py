"""graphrl.spec.jinja: the one expression language (templates and bare expressions)."""

from __future__ import annotations

import pytest
from jinja2.exceptions import TemplateSyntaxError, UndefinedError

from graphrl.spec.jinja import (
    attribute_refs,
    compile_expression,
    compile_template,
    make_env,
    parse_expression,
    parse_template,
)

env = make_env()


def test_free_variables_of_a_template():
    p = parse_template(env, "{{ q }} {% for x in xs %}{{ x.y }}{% endfor %} {{ a.b | upper }}")
    assert p.free == {"q", "xs", "a"}


def test_free_variables_of_an_expression():
    assert parse_expression(env, "a.b == 'x' and c['d'] | length > n").free == {"a", "c", "n"}


def test_attribute_refs():
    p = parse_expression(env, "a.b == 'x' and c['d'] and e[0] and f[g]")
    assert attribute_refs(p.ast) == [("a", "b", 1), ("c", "d", 1)]


@pytest.mark.parametrize("bad", ["a b", "a ==", "{{ a }}", "a }}", "(a", ""])
def test_expression_syntax_errors_raise(bad):
    with pytest.raises(TemplateSyntaxError):
        parse_expression(env, bad)


def test_template_syntax_error_has_the_template_line():
    with pytest.raises(TemplateSyntaxError) as exc:
        parse_template(env, "line 1\nline 2\n{% if x %}\nno end\n")
    assert exc.value.lineno >= 3


def test_undefined_names_raise_instead_of_rendering_empty():
    with pytest.raises(UndefinedError):
        compile_template(env, "{{ y }}")({})
    with pytest.raises(UndefinedError):
        compile_template(env, "{{ y.z }}")({"y": {}})


def test_native_keeps_the_type_of_a_lone_expression():
    assert compile_template(env, "{{ x }}", native=True)({"x": [1, 2]}) == [1, 2]
    assert compile_template(env, "  {{ x + 1 }}\n", native=True)({"x": 2}) == 3
    assert compile_template(env, "{{ x }} and {{ x }}", native=True)({"x": 1}) == "1 and 1"
    assert compile_template(env, "{{ x }}")({"x": [1, 2]}) == "[1, 2]"


def test_native_falls_back_to_a_template_when_the_text_is_not_one_expression():
    assert compile_template(env, "{{ a }} text }}", native=True)({"a": 1}) == "1 text }}"


def test_values_are_data_never_evaluated():
    assert compile_template(env, "{{ t }}")({"t": "{{ 7 * 7 }}"}) == "{{ 7 * 7 }}"
    assert compile_template(env, "{{ t }}", native=True)({"t": "{% raw %}"}) == "{% raw %}"


def test_compile_expression():
    assert compile_expression(env, "a + 1")({"a": 2}) == 3
    assert compile_expression(env, "'STOP' in (v | upper)")({"v": "stop now"}) is True


def test_trailing_newline_is_kept():
    assert compile_template(env, "a\n")({}) == "a\n"


def test_no_autoescape():
    assert compile_template(env, "{{ s }}")({"s": "<b>&</b>"}) == "<b>&</b>"


def test_snake_filter():
    assert compile_template(env, "{{ 'Sub-Goal X' | snake }}")({}) == "sub_goal_x"


_ITEM_CASES = [
    "{{ d.a }}",
    "{{ d._x }}",
    "{{ d.items | list | length }}",
    "{{ d.get('a') }}",
    "{{ d.missing }}",
    "{{ d.missing | default('m') }}",
    "{{ d.__class__ }}",
    "{{ d.nested.b }}",
    "{{ n.text }}",
    "{{ n.keys() | list }}",
    "{{ n.nope }}",
    "{{ s.upper() }}",
]


@pytest.mark.parametrize("source", _ITEM_CASES)
def test_item_lookup_fast_path_gives_what_jinja_gives(source):
    """`value.name` on plain mappings is looked up as an item directly (make_env's item_types): the
    same output, or the same error, as Jinja's own sandboxed lookup (item_types empty)."""
    from graphrl.runtime.scope import NodeResult

    ctx = {"d": {"a": 1, "_x": 2, "items": 5, "nested": {"b": [1]}}, "n": NodeResult(text="t", ok=True), "s": "x"}

    def render(env):
        try:
            return env.from_string(source).render(ctx)
        except Exception as exc:  # compared by type and message
            return f"{type(exc).__name__}: {exc}"

    fast, reference = make_env(item_types=(dict, NodeResult)), make_env(item_types=())
    assert render(fast) == render(reference)


def test_node_results_hold_no_attributes():
    """The item fast path relies on it: a node result's fields are items only."""
    from graphrl.runtime.scope import NodeResult

    with pytest.raises(AttributeError):
        NodeResult(text="t").extra = 1
