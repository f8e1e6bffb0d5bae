"""`{% include "file.j2" %}` in prompt templates: expanded at load time under the same confinement as
any prompt file (so `check` sees the whole text and nothing is read at run time); a missing file,
an include leading out of the folder, a cycle or an unsupported form is a located E007."""

from __future__ import annotations

from pathlib import Path

from graphrl.compilers.checks import check_file
from graphrl.compilers.lower import plan_from_path


def _graph(tmp: Path, files: dict[str, str]) -> Path:
    prompts = tmp / "g" / "prompts"
    prompts.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (prompts / name).write_text(text, encoding="utf-8")
    path = tmp / "g" / "graph.yaml"
    path.write_text(
        "name: t\ntemplates: prompts\ninputs: {question: prompt}\n"
        "nodes:\n  solve:\n    llm: policy\n    prompt: [{user: ask.j2}]\n",
        encoding="utf-8",
    )
    return path


def _e007(path: Path) -> list[str]:
    g, diags = check_file(path)
    return [f"{d.message} | {d.hint} | {d.span.line if d.span else None}" for d in diags if d.code == "E007"]


def test_an_include_is_expanded_into_the_plan(tmp_path):
    path = _graph(
        tmp_path,
        {
            "ask.j2": '{% include "rules.j2" %}\nQuestion: {{ question }}',
            "rules.j2": "Rules: {% include 'tone.j2' -%}\n  be brief.\n",
            "tone.j2": "be kind,",
        },
    )
    plan, diags = plan_from_path(path)
    assert plan is not None, diags
    (msg,) = plan.nodes["solve"].prompt
    assert msg.content == "Rules: be kind,be brief.\n\nQuestion: {{ question }}"


def test_an_include_of_a_missing_file_names_it_and_the_files_there(tmp_path):
    (msg,) = _e007(_graph(tmp_path, {"ask.j2": 'Hi\n{% include "rulez.j2" %}', "rules.j2": "x"}))
    assert "prompts/ask.j2:2: included template 'rulez.j2' not found" in msg
    assert "files there: ask.j2, rules.j2" in msg and msg.endswith("| 7")  # located at the graph's use


def test_an_include_leading_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "secret.j2").write_text("secret")
    (msg,) = _e007(_graph(tmp_path, {"ask.j2": '{% include "../secret.j2" %}'}))
    assert "outside the templates folder" in msg


def test_cycles_and_unsupported_forms_are_refused(tmp_path):
    (msg,) = _e007(_graph(tmp_path, {"ask.j2": '{% include "b.j2" %}', "b.j2": '{% include "ask.j2" %}'}))
    assert "template include cycle: ask.j2 -> b.j2 -> ask.j2" in msg
    for form in (
        '{% import "b.j2" as b %}',
        '{% from "b.j2" import x %}',
        '{% extends "b.j2" %}',
        "{% include name %}",
    ):
        (msg,) = _e007(_graph(tmp_path, {"ask.j2": form, "b.j2": "x"}))
        assert "is not supported in graph templates" in msg, form
