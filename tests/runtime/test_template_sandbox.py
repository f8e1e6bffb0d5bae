"""Graph templates render in Jinja's immutable sandbox: every route to Python fails, statically at
`check` where the route is visible (E205), at run time otherwise (a located failure of the rollout),
and text arriving as data (a row, model output, state) is never evaluated."""

from __future__ import annotations

import os

import pytest

from graphrl.compilers.lower import plan_from_path

ATTACKS = [
    "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}",
    "{{ lipsum.__globals__['os'].popen('touch PWNED').read() }}",
    "{{ question | attr('__class__') }}",
    "{{ '{0.__class__.__mro__}'.format(question) }}",
    "{{ namespace.__init__.__globals__ }}",
]


def _graph(kit, template: str, *, where: str = "prompt"):
    prompt = template if where == "prompt" else "{{ question }}"
    when = template.strip("{} ") if where == "when" else "true"
    return kit.write(
        "g.yaml",
        f"""\
name: attack
inputs: {{question: prompt, key: metadata.key}}
nodes:
  solve:
    llm: policy
    prompt: {prompt!r}
    next:
      - when: {when!r}
        goto: end
      - goto: end
""",
    )


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("where", ["prompt", "when"])
def test_every_visible_route_is_refused_by_check(kit, attack, where):
    plan, diags = plan_from_path(_graph(kit, attack, where=where))
    assert plan is None
    assert any(d.code == "E205" for d in diags), [str(d) for d in diags]


def test_a_template_file_is_checked_too(kit):
    (kit.dir / "p.j2").write_text("Hi {{ cycler.__init__.__globals__ }}\n", encoding="utf-8")
    path = kit.write(
        "g.yaml",
        """\
        name: attack_file
        inputs: {question: prompt}
        nodes:
          solve: {llm: policy, prompt: [{user: p.j2}]}
        """,
    )
    _, diags = plan_from_path(path)
    found = [d for d in diags if d.code == "E205"]
    assert found and all(d.span.file.endswith("p.j2") and d.span.line == 1 for d in found)


def test_a_route_known_only_at_run_time_fails_the_rollout_located(kit, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = kit.plan("""\
        name: dynamic_key
        inputs: {question: prompt, key: metadata.key}
        nodes:
          solve:
            llm: policy
            prompt: [{user: "{{ question[key] }}"}]
        """)
    engine = kit.engine(["x"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q", "metadata": {"key": "__class__"}})
    assert res.status == "failed" and "g.yaml:" in res.error and "internal error" not in res.error
    assert engine.requests == []


def test_attack_text_in_data_and_model_output_stays_data(kit, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = kit.plan("""\
        name: data
        inputs: {question: prompt}
        state: {seen: ""}
        nodes:
          solve:
            llm: policy
            prompt: [{user: "{{ question }}"}]
            update: {seen: "{{ output.text }}"}
            next: again
          again:
            llm: policy
            prompt: [{user: "{{ seen }} / {{ question }}"}]
        """)
    attack = ATTACKS[0]
    engine = kit.engine([attack, "ok"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": attack})
    assert res.status == "completed", res.error
    assert not os.path.exists(tmp_path / "PWNED")
    second = kit.r.decode(engine.requests[1].input_ids)
    assert f"{attack} / {attack}" in second  # rendered verbatim, never evaluated


def test_include_is_refused(kit):
    plan, diags = plan_from_path(
        kit.write(
            "g.yaml",
            """\
        name: include
        inputs: {question: prompt}
        nodes:
          solve: {llm: policy, prompt: [{user: "{% include '/etc/passwd' %}"}]}
        """,
        )
    )
    engine = kit.engine(["x"])
    if plan is not None:
        res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q"})
        assert res.status == "failed" and "passwd" not in kit.r.decode(
            engine.requests[0].input_ids if engine.requests else ()
        )
