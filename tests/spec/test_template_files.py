"""Prompt template files are confined to the graph's templates folder, regular, and bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphrl.compilers.checks import check_file
from graphrl.spec.template_files import MAX_TEMPLATE_BYTES


def _graph(tmp: Path, prompt: str, *, outside: bool = False) -> Path:
    (tmp / "g").mkdir(exist_ok=True)
    (tmp / "g" / "prompts").mkdir(exist_ok=True)
    path = tmp / "g" / "graph.yaml"
    path.write_text(
        f"""name: t
templates: prompts
{"templates_outside: true" if outside else ""}
inputs: {{question: prompt}}
nodes:
  solve:
    llm: policy
    prompt: [{{user: "{prompt}"}}]
""",
        encoding="utf-8",
    )
    return path


def _e007(path: Path) -> list[str]:
    g, diags = check_file(path)
    assert g is None
    return [f"{d.message} | {d.hint}" for d in diags if d.code == "E007"]


def test_a_relative_path_out_of_the_folder_is_refused(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.j2").write_text("secret {{ question }}")
    (msg,) = _e007(_graph(tmp_path, "../../outside/x.j2"))
    assert "outside the templates folder" in msg and "templates_outside: true" in msg


def test_an_absolute_path_is_refused(tmp_path):
    (tmp_path / "abs.j2").write_text("secret")
    (msg,) = _e007(_graph(tmp_path, str(tmp_path / "abs.j2")))
    assert "outside the templates folder" in msg


def test_a_symlink_leading_out_is_refused_even_to_etc_passwd(tmp_path):
    path = _graph(tmp_path, "p.j2")
    os.symlink("/etc/passwd", tmp_path / "g" / "prompts" / "p.j2")
    (msg,) = _e007(path)
    assert "resolves to /etc/passwd" in msg


def test_opting_in_allows_outside_files_but_never_devices(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.j2").write_text("fine {{ question }}")
    g, diags = check_file(_graph(tmp_path, "../../outside/x.j2", outside=True))
    assert g is not None, diags
    path = _graph(tmp_path, "z.j2", outside=True)
    os.symlink("/dev/zero", tmp_path / "g" / "prompts" / "z.j2")
    (msg,) = _e007(path)
    assert "not a regular file" in msg


def test_a_huge_template_is_refused_without_reading_it_all(tmp_path):
    path = _graph(tmp_path, "big.j2")
    (tmp_path / "g" / "prompts" / "big.j2").write_bytes(b"x" * (MAX_TEMPLATE_BYTES + 10))
    (msg,) = _e007(path)
    assert f"larger than {MAX_TEMPLATE_BYTES} bytes" in msg


def test_a_missing_templates_folder_is_named(tmp_path):
    path = _graph(tmp_path, "p.j2")
    path.write_text(path.read_text().replace("templates: prompts", "templates: promtps"))
    (msg,) = _e007(path)
    assert "does not exist" in msg and "promtps" in msg


@pytest.mark.parametrize("name", ["agentflow", "memagent", "toolorchestra", "search_r1"])
def test_the_bundled_graphs_still_load_their_prompts(name):
    g, diags = check_file(Path(__file__).resolve().parents[2] / "graphs" / f"{name}.yaml")
    assert g is not None and g.templates, diags
