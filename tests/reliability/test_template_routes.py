"""Graph templates are sandboxed: Python references (`module:function`) are the one way a graph runs
code. Every `__globals__` / `__class__` / `attr` / `format` route is refused: at `check` time where the
template shows it (E205, located in the YAML or the .j2 file), at run time by Jinja's sandbox (a
located RenderError that ends the rollout, never an internal error) where it does not show -- a
key that arrives through a data row, or a plan.json that never went through `check`. An attack
string that arrives as data (a row's prompt, a state value) is rendered as text and runs nothing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import located

from graphrl.compilers.checks import check_file
from graphrl.compilers.lower import lower, plan_from_path
from graphrl.engines.scripted import ScriptedEngineForTests
from graphrl.models.tokenizer import qwen_tokenizer
from graphrl.plan import plan_json
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.runtime.scope import Renderer, RenderError
from graphrl.runtime.services import StaticEndpoints
from graphrl.tools.registry import ToolBox

SENTINEL = "graphrl_sandbox_sentinel"


def attacks(sentinel: Path) -> dict[str, str]:
    """Each route, as a Jinja expression; the shell ones would create `sentinel` if they ran."""
    cmd = f"touch {sentinel}"
    return {
        "cycler_globals": f"cycler.__init__.__globals__.os.popen('{cmd}').read()",
        "joiner_globals": f"joiner.__init__.__globals__['os'].popen('{cmd}').read()",
        "lipsum_globals": f"lipsum.__globals__.os.popen('{cmd}').read()",
        "namespace_globals": f"namespace.__init__.__globals__.os.system('{cmd}')",
        "environ": "lipsum.__globals__.os.environ",
        "class_mro": "''.__class__.__mro__[1].__subclasses__()",
        "getitem_dunder": "q['__class__']",
        "attr_filter": "q|attr('__class__')",
        "attr_filter_chain": f"(cycler|attr('__init__')|attr('__globals__'))['os'].popen('{cmd}').read()",
        "str_format": "'{0.__class__.__init__.__globals__}'.format(q)",
        "str_format_map": "'{x.__class__}'.format_map({'x': q})",
        "map_attribute": "[q]|map(attribute='__class__')|list",
        "selectattr": "[q]|selectattr('__class__')|list",
        "private_attr": "q._private",
    }


ROUTES = sorted(attacks(Path("/x")))


def graph_with(site: str, expr: str) -> str:
    """A valid graph whose `site` holds `expr` (the other sites are harmless)."""
    prompt = f"'{{{{ {expr} }}}}'" if site == "prompt" else "'{{ q }}'"
    when = expr if site == "when" else "a.ok"
    update = f'"{{{{ {expr} }}}}"' if site == "update" else '"{{ a.text }}"'
    reward = f'"{{{{ {expr} }}}}"' if site == "reward" else '"{{ a.text }}"'
    prompt = prompt.replace("'{{", '"{{').replace("}}'", '}}"') if "'" in expr else prompt
    return f"""\
name: s
inputs: {{q: prompt, gold: label}}
state: {{memo: ""}}
nodes:
  a:
    llm: policy
    prompt: {prompt}
    max_tokens: 8
    update: {{memo: {update}}}
    next:
      - {{when: "{when}", goto: end}}
      - goto: end
reward:
  fn: exact_match
  args: {{prediction: {reward}, label: "{{{{ gold }}}}"}}
"""


@pytest.mark.parametrize("site", ["prompt", "when", "update", "reward"])
@pytest.mark.parametrize("route", ROUTES)
def test_check_flags_every_route_in_every_site(tmp_path, route, site):
    expr = attacks(tmp_path / SENTINEL)[route].replace('"', "'")
    f = tmp_path / "g.yaml"
    f.write_text(graph_with(site, expr))
    _, diags = check_file(f)
    e205 = [d for d in diags if d.code == "E205"]
    assert e205, [d.render() for d in diags]
    line = next(i for i, text in enumerate(f.read_text().splitlines(), 1) if expr in text)
    assert all(d.span.file == str(f) and d.span.line == line for d in e205), [d.render() for d in e205]
    assert plan_from_path(f)[0] is None  # compile refuses it too
    assert not (tmp_path / SENTINEL).exists()


@pytest.mark.parametrize("route", ROUTES)
def test_check_flags_every_route_in_a_template_file(tmp_path, route):
    expr = attacks(tmp_path / SENTINEL)[route]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "p.j2").write_text(f"Question: {{{{ q }}}}\n\n{{{{ {expr} }}}}\n")
    f = tmp_path / "g.yaml"
    f.write_text("name: s\ntemplates: t\ninputs: {q: prompt}\nnodes:\n  a: {llm: policy, prompt: [user: p.j2]}\n")
    _, diags = check_file(f)
    e205 = [d for d in diags if d.code == "E205"]
    assert e205 and all(d.span.file == str(tmp_path / "t" / "p.j2") and d.span.line == 3 for d in e205), [
        d.render() for d in diags
    ]


@pytest.mark.parametrize("route", ROUTES)
def test_the_sandbox_refuses_every_route_at_run_time(tmp_path, route):
    """The Renderer on its own (what runs a plan.json that never went through `check`)."""
    f = tmp_path / "g.yaml"
    f.write_text(graph_with("prompt", "q"))
    plan = plan_from_path(f)[0]
    render = Renderer(plan)
    expr = attacks(tmp_path / SENTINEL)[route]
    for mode, text in (("text", f"{{{{ {expr} }}}}"), ("native", f"{{{{ {expr} }}}}"), ("expr", expr)):
        with pytest.raises(RenderError) as info:
            if mode == "expr":
                render.expr(("nodes", "a", "next", 0, "when"), text, {"q": "x"})
            elif mode == "native":
                render.value(("nodes", "a", "update", "memo"), text, {"q": "x"})
            else:
                render.text(("nodes", "a", "prompt", 0, "user"), text, {"q": "x"})
        assert located(str(info.value)), str(info.value)
    assert not (tmp_path / SENTINEL).exists()


def _executor(plan, replies=("The answer",)):
    tok = qwen_tokenizer()
    renderer = ChatRenderer(tok)
    engine = ScriptedEngineForTests(
        [tuple(renderer.encode(t)) + (151645,) for t in replies], tokenizer=tok, default_logprob=-0.25
    )
    eps = StaticEndpoints({name: engine for name in plan.models}, renderer)
    search = [Path(plan.source["file"]).parent]
    return Executor(plan, eps, tools=ToolBox(search), rewards=RewardBox(search)), renderer


def _run(ex, row):
    return asyncio.run(ex.run(RolloutInput(row=row, rollout_id=0)))


def test_a_plan_json_that_skipped_check_fails_its_rollout_with_a_located_render_error(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(graph_with("prompt", "q"))
    g, _ = check_file(f)
    data = json.loads(plan_json(lower(g)))
    msg = data["nodes"]["a"]["prompt"][0]
    msg[next(iter(msg))] = "{{ " + attacks(tmp_path / SENTINEL)["cycler_globals"] + " }}"
    (tmp_path / "plan.json").write_text(json.dumps(data))
    plan = plan_from_path(tmp_path / "plan.json")[0]
    ex, _ = _executor(plan)
    res = _run(ex, {"prompt": "hi", "label": "x"})
    assert res.status == "failed" and res.error.startswith("RenderError: ")
    assert located(res.error.removeprefix("RenderError: ")) and "unsafe" in res.error, res.error
    assert "internal error" not in res.error and res.samples == () and res.calls == ()
    assert not (tmp_path / SENTINEL).exists()


def test_a_key_from_a_data_row_is_refused_at_run_time(tmp_path):
    """`metadata[metadata.k]` passes `check` (nothing to see); with k = '__class__' from the row, the
    sandbox refuses the lookup and the rollout fails with a located error."""
    f = tmp_path / "g.yaml"
    f.write_text(
        "name: s\ninputs: {m: metadata}\nnodes:\n  a:\n    llm: policy\n    prompt: '{{ m[m.k] }}'\n    max_tokens: 8\n"
    )
    plan, diags = plan_from_path(f)
    assert plan is not None, diags
    ex, _ = _executor(plan)
    ok = _run(ex, {"prompt": "p", "metadata": {"k": "x", "x": "fine"}})
    assert ok.status == "completed", ok.error
    res = _run(ex, {"prompt": "p", "metadata": {"k": "__class__"}})
    assert res.status == "failed" and res.error.startswith("RenderError: "), res.error
    assert f"{f.name}:6:" in res.error and "unsafe" in res.error and res.calls == ()


def test_attack_strings_in_data_and_state_stay_text(tmp_path):
    """A row's prompt and a state value holding every route are rendered verbatim, and run nothing."""
    texts = ["{{ " + a + " }}" for a in attacks(tmp_path / SENTINEL).values()]
    payload = "\n".join(texts)
    f = tmp_path / "g.yaml"
    f.write_text(
        "name: s\ninputs: {q: prompt}\nstate: {memo: ''}\nnodes:\n"
        "  a:\n    llm: policy\n    prompt: '{{ q }}'\n    max_tokens: 512\n"
        "    update: {memo: '{{ q }}|{{ a.text }}'}\n    next: b\n"
        "  b:\n    llm: policy\n    prompt: 'memo: {{ memo }}'\n    max_tokens: 8\n"
    )
    plan = plan_from_path(f)[0]
    ex, renderer = _executor(plan, replies=(texts[0], "done"))
    res = _run(ex, {"prompt": payload})
    assert res.status == "completed", res.error
    assert res.state["memo"] == payload + "|" + texts[0]
    second = renderer.decode(res.samples[1].prompt_ids)
    assert payload in second and texts[0] in second
    assert not (tmp_path / SENTINEL).exists()


def test_graphrl_check_exits_3_with_e205_and_runs_nothing(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(graph_with("prompt", attacks(tmp_path / SENTINEL)["cycler_globals"]))
    p = subprocess.run(
        [sys.executable, "-m", "graphrl.cli", "check", str(f)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 3 and "error[E205]" in p.stderr and f"{f}:7:" in p.stderr, p.stderr
    assert not (tmp_path / SENTINEL).exists()


def test_plain_templates_are_not_flagged_and_keep_working(tmp_path):
    """What graphs do write: fields, items, filters, loops, methods on strings and dicts."""
    f = tmp_path / "g.yaml"
    f.write_text(
        "name: s\ninputs: {q: prompt, m: metadata}\nnodes:\n  a:\n    llm: policy\n"
        '    prompt: "{% for k, v in m.items() %}{{ k }}={{ v|string|upper }};{% endfor %}'
        "{{ q.strip().split(' ')|join('_') }} {{ m.get('x', 'none') }} {{ '%s!'|format(q) }}"
        " {{ m|dictsort|map(attribute='0')|join(',') }} {{ range(3)|list }}\"\n    max_tokens: 8\n"
    )
    plan, diags = plan_from_path(f)
    assert plan is not None and not [d for d in diags if d.severity == "error"], [d.render() for d in diags]
    text = Renderer(plan).text(
        ("nodes", "a", "prompt", 0, "user"), plan.nodes["a"].prompt[0].content, {"q": " a b ", "m": {"y": 1, "x": 2}}
    )
    assert text == "y=1;x=2;a_b 2  a b ! x,y [0, 1, 2]"


def test_templates_cannot_mutate_values_they_are_given(tmp_path):
    """State changes only through `update:` (and its merge rules): the sandbox is immutable."""
    f = tmp_path / "g.yaml"
    f.write_text(graph_with("prompt", "q"))
    render = Renderer(plan_from_path(f)[0])
    xs = [1]
    with pytest.raises(RenderError, match="unsafe"):
        render.text(("x",), "{{ xs.append(2) }}", {"xs": xs})
    assert xs == [1]


def test_the_fast_paths_never_touch_underscore_attributes():
    from graphrl.runtime.scope import NodeResult, _fast
    from graphrl.spec.jinja import make_env

    env = make_env()
    for mode in ("text", "native", "expr"):
        text = "x.__class__" if mode == "expr" else "{{ x.__class__ }}"
        fn = _fast(env, text, mode)
        with pytest.raises(Exception) as info:
            v = fn({"x": NodeResult(text="t", __class__="data")})
            if hasattr(v, "_fail_with_undefined_error"):
                v._fail_with_undefined_error()
        assert "unsafe" in str(info.value)
