"""Scope: template rendering (native types, model output never evaluated), state merges, located errors."""

from __future__ import annotations

import pytest

from graphrl.runtime.scope import NodeResult, Renderer, RenderError, cut, merge_state
from graphrl.spec.model import StateVar

MINIMAL = """
name: t
inputs: {q: prompt}
state:
  n: 0
nodes:
  a:
    llm: policy
    prompt: [user: "{{ q }}"]
    update:
      n: "{{ 10 // (q | int) }}"
    next:
      - {when: "a.text | int > 1", goto: end}
      - goto: end
"""


@pytest.fixture
def render(kit):
    return Renderer(kit.plan(MINIMAL))


# ---------------------------------------------------------------- native types


def test_a_whole_expression_keeps_its_native_type(render):
    ctx = {"xs": [1, 2], "d": {"k": [3]}, "n": 4, "flag": False, "s": "text"}
    assert render.value(("x",), "{{ xs + [3] }}", ctx) == [1, 2, 3]
    assert render.value(("x",), "  {{ d }}\n", ctx) == {"k": [3]}
    assert render.value(("x",), "{{ n * 2 }}", ctx) == 8
    assert render.value(("x",), "{{ flag }}", ctx) is False
    assert render.value(("x",), "{{ none }}", {"none": None}) is None
    # anything more than one {{ expr }} is text
    assert render.value(("x",), "n={{ n }}", ctx) == "n=4"
    assert render.value(("x",), "{{ n }}{{ n }}", ctx) == "44"
    assert render.text(("x",), "{{ xs }}", ctx) == "[1, 2]"
    # nested values: each string rendered, keys too
    got = render.value(("x",), {"{{ s }}_key": ["{{ n }}", "lit", 3], "plain": "{{ xs }}"}, ctx)
    assert got == {"text_key": [4, "lit", 3], "plain": [1, 2]}


def test_a_node_result_renders_as_its_text_and_exposes_fields(render):
    res = NodeResult(text="hello", ok=True, answer="42")
    assert render.text(("x",), "<{{ a }}>|{{ a.answer }}|{{ a.ok }}", {"a": res}) == "<hello>|42|True"


@pytest.mark.parametrize(
    "payload",
    [
        "{{ 7*7 }}",
        "{% for i in range(3) %}X{% endfor %}",
        "{{ ''.__class__.__mro__ }}",
        "{# comment #}{% raw %}r{% endraw %}",
    ],
)
def test_model_output_through_a_variable_is_never_evaluated(render, payload):
    ctx = {"out": payload, "res": NodeResult(text=payload)}
    assert render.text(("x",), "Prev: {{ out }}", ctx) == f"Prev: {payload}"
    assert render.value(("x",), "{{ out }}", ctx) == payload
    assert render.text(("x",), "{{ res }}", ctx) == payload
    assert render.value(("x",), {"k": ["{{ res.text }}"]}, ctx) == {"k": [payload]}


def test_model_output_with_jinja_flows_through_a_rollout_verbatim(kit):
    payload = "{{ 7*7 }} and {% for i in range(3) %}X{% endfor %}"
    plan = kit.plan("""
        name: t
        inputs: {q: prompt}
        state:
          memo: ""
        nodes:
          first:
            llm: policy
            prompt: [user: "{{ q }}"]
            update: {memo: "{{ output.text }}"}
            next: second
          second:
            llm: policy
            prompt: [user: "Earlier you wrote: {{ first.text }} / {{ memo }}"]
        """)
    eng = kit.engine([payload, "ok"])
    res = kit.run(kit.executor(plan, {"policy": eng}), {"prompt": "go"})
    assert res.status == "completed", res.error
    assert res.state["memo"] == payload
    second_prompt = kit.r.decode(eng.requests[1].input_ids)
    assert f"Earlier you wrote: {payload} / {payload}" in second_prompt
    assert "49" not in second_prompt and "XXX" not in second_prompt


# ---------------------------------------------------------------- located errors


def test_render_error_carries_the_yaml_location(render):
    with pytest.raises(RenderError) as err:
        render.value(("nodes", "a", "update", "n"), "{{ 10 // (q | int) }}", {"q": "0"})
    assert err.value.where.endswith("g.yaml:11:10")
    assert "ZeroDivisionError" in str(err.value) and str(err.value).startswith(err.value.where)
    with pytest.raises(RenderError) as err:
        render.expr(("nodes", "a", "next", 0, "when"), "a.text | int > 1", {"a": {}})
    assert err.value.where.endswith("g.yaml:13:16") and "undefined" in str(err.value)
    # an unlocated sub-path falls back to its nearest located ancestor
    with pytest.raises(RenderError) as err:
        render.text(("nodes", "a", "update", "n", "deeper", 3), "{{ nope }}", {})
    assert err.value.where.endswith("g.yaml:11:10")


def test_a_render_error_fails_the_rollout_with_location_and_keeps_samples(kit):
    plan = kit.plan(MINIMAL)
    res = kit.run(kit.executor(plan, {"policy": kit.engine(["5"])}), {"prompt": "0"})
    assert res.status == "failed"
    assert "g.yaml:11:10" in res.error and "ZeroDivisionError" in res.error
    assert len(res.samples) == 1 and res.samples[0].status == "failed" and res.reward is None


# ---------------------------------------------------------------- state merges


def test_overwrite_replaces():
    state = {"m": "old"}
    merge_state(state, "m", StateVar(), ["new"])
    assert state == {"m": ["new"]}


def test_append_adds_one_item_and_keeps_the_last_max_items():
    decl = StateVar(merge="append", max_items=2)
    state: dict = {"log": []}
    for v in ("a", ["b"], {"c": 1}):
        merge_state(state, "log", decl, v)
    assert state["log"] == [["b"], {"c": 1}]


def test_append_does_not_mutate_the_previous_list():
    decl = StateVar(merge="append")
    before = ["a"]
    state = {"log": before}
    merge_state(state, "log", decl, "b")
    assert before == ["a"] and state["log"] == ["a", "b"]


def test_keyed_merges_rewrites_move_to_the_end_and_max_items_drops_the_oldest():
    decl = StateVar(merge="keyed", max_items=2)
    state: dict = {"m": {}}
    merge_state(state, "m", decl, {"a": 1})
    merge_state(state, "m", decl, {"b": 2})
    merge_state(state, "m", decl, {"a": 3})
    assert list(state["m"].items()) == [("b", 2), ("a", 3)]
    merge_state(state, "m", decl, {"c": 4})
    assert list(state["m"].items()) == [("a", 3), ("c", 4)]
    with pytest.raises(TypeError, match="keyed"):
        merge_state(state, "m", decl, "not a mapping")


TEXT = "0123456789ABCDEFGHIJ"


@pytest.mark.parametrize(
    "where,head,tail", [("middle", "01234", "FGHIJ"), ("start", "", "ABCDEFGHIJ"), ("end", "0123456789", "")]
)
def test_max_chars_cut_positions(where, head, tail):
    state: dict = {}
    merge_state(state, "r", StateVar(max_chars=10, cut=where), TEXT)
    got = state["r"]
    assert got.startswith(head) and got.endswith(tail)
    assert "[10 characters cut]" in got
    assert got.replace("\n...[10 characters cut]...\n", "") == head + tail


def test_max_chars_applies_inside_written_dicts_and_lists_and_not_to_short_text():
    state: dict = {}
    decl = StateVar(merge="keyed", max_chars=4)
    merge_state(state, "mem", decl, {"Step 1": {"result": "abcdefgh", "n": 5, "short": "abc"}})
    rec = state["mem"]["Step 1"]
    assert rec["n"] == 5 and rec["short"] == "abc"
    assert rec["result"].startswith("ab") and rec["result"].endswith("gh") and "cdef" not in rec["result"]
    assert cut("abc", 3) == "abc" and cut("abc", None) == "abc"


def test_mutable_state_defaults_are_fresh_per_rollout(kit):
    plan = kit.plan("""
        name: t
        state:
          memory: {default: {}, merge: keyed}
        nodes:
          a:
            llm: policy
            prompt: [user: hi]
            update:
              memory: {"k{{ visits.a }}": "{{ output.text }}"}
        """)
    ex = kit.executor(plan, {"policy": kit.engine(lambda p, i: f"r{i}")})
    one, two = kit.run(ex, {}, 0), kit.run(ex, {}, 1)
    assert one.state["memory"] == {"k1": "r0"}
    assert two.state["memory"] == {"k1": "r1"}
    assert plan.state["memory"].default == {}


# ---------------------------------------------------------------- the dotted-path fast path


class _Attr:
    text = "attribute, not item"


_PATH_CTX = {
    "q": "what?",
    "n": 3,
    "none": None,
    "d": {"a": {"b": [1, 2]}, "items": "shadowed"},
    "out": NodeResult(text="hello", ok=True, calls=[{"name": "x"}]),
    "obj": _Attr(),
    "sub": type("D", (dict,), {})(text="a dict subclass"),
    "range": "ctx wins over globals",
}
_PATH_TEMPLATES = [
    "{{ q }}",
    "{{ n }}",
    "{{ none }}",
    "{{ d.a }}",
    "{{ d.a.b }}",
    "{{ d . a }}",
    "{{ out }}",
    "{{ out.text }}",
    "{{ out.ok }}",
    "{{ out.calls }}",
    "{{ obj.text }}",
    "{{ sub.text }}",
    "{{ range }}",
    "{{ d.items }}",
    " {{ q }}",
    "{{ q }}\n",
    "{{ true }}",
    "{{ None }}",
]


@pytest.mark.parametrize("template", _PATH_TEMPLATES)
@pytest.mark.parametrize("mode", ["text", "native", "expr"])
def test_dotted_path_fast_path_matches_jinja(kit, template, mode):
    from graphrl.runtime import scope

    fast = Renderer(kit.plan(MINIMAL))
    slow = Renderer(kit.plan(MINIMAL))
    slow._compiled = lambda text, m: scope._fast_jinja(slow.env, text, m) or pytest.fail("no Jinja path")
    source = template.strip()[2:-2] if mode == "expr" else template
    got, want = (
        fast._run(("nodes", "a"), source, mode, dict(_PATH_CTX)),
        slow._run(("nodes", "a"), source, mode, dict(_PATH_CTX)),
    )
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("template", ["{{ missing }}", "{{ d.nope }}", "{{ out.nope }}", "{{ n.x }}"])
def test_dotted_path_fast_path_fails_like_jinja(kit, template):
    render = Renderer(kit.plan(MINIMAL))
    for mode in ("text", "native"):
        with pytest.raises(RenderError, match="undefined value"):
            render._run(("nodes", "a"), template, mode, dict(_PATH_CTX))


def test_dotted_path_fast_path_is_taken_for_paths_only(kit):
    from graphrl.runtime import scope

    slow = lambda ctx: "jinja"
    assert scope._path_lookup(" out.text ", slow, text=False)({"out": NodeResult(text="t")}) == "t"
    assert scope._path_lookup("out.text", slow, text=False)({}) == "jinja"  # missing: Jinja decides
    assert scope._path_lookup("d.items", slow, text=False) is None  # a dict method name: Jinja's getattr wins
    for expr in ("a + 1", "a[0]", "a | trim", "true", "a.b()", "'x'"):
        assert scope._path_lookup(expr, slow, text=False) is None


@pytest.mark.parametrize(
    "text, ctx",
    [
        ("metadata.context", {"metadata": {"context": "c"}}),
        ("metadata.context", {"metadata": {}}),  # absent from the row
        ("metadata.context.deeper", {"metadata": {}}),  # an attribute of an undefined value
        ("metadata.n | int + 1", {"metadata": {"n": "4"}}),
        ("metadata.items[3]", {"metadata": {"items": [1]}}),  # an error inside the expression
        ("1 / metadata.zero", {"metadata": {"zero": 0}}),
        ("metadata.", {"metadata": {}}),  # not even an expression
    ],
)
def test_expr_or_none_is_expr_with_every_render_error_as_none(render, text, ctx):
    """What an optional input's `from:` gives (`Executor._init`): `expr`'s value, or None wherever
    `expr` raises a RenderError."""
    try:
        want = render.expr(("inputs", "x", "from"), text, ctx)
    except RenderError:
        want = None
    assert render.expr_or_none(text, ctx) == want
    assert (want is None) == (text != "metadata.n | int + 1" and ctx != {"metadata": {"context": "c"}})
