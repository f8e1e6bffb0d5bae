"""Template paths stay inside the graph's templates folder (unless `templates_outside: true`), name
regular files only, and are read with a size bound: `../` escapes, absolute paths and symlinks out
(to another folder, to /etc/passwd, to /dev/zero) are located errors and nothing of them reaches
plan.json."""

from __future__ import annotations

import os

import pytest

from graphrl.compilers.checks import check_file
from graphrl.compilers.lower import lower
from graphrl.plan import plan_json
from graphrl.spec.template_files import MAX_TEMPLATE_BYTES


def graph(tmp_path, ref: str, extra: str = "") -> os.PathLike:
    f = tmp_path / "g" / "g.yaml"
    f.parent.mkdir(parents=True, exist_ok=True)
    (f.parent / "t").mkdir(exist_ok=True)
    f.write_text(
        f"name: s\ntemplates: t\n{extra}inputs: {{q: prompt}}\nnodes:\n"
        f"  a:\n    llm: policy\n    prompt:\n      - system: {ref}\n      - user: '{{{{ q }}}}'\n"
    )
    return f


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "x.j2").write_text("SECRET outside text {{ q }}")
    return d


def one_error(f, code):
    g, diags = check_file(f)
    errs = [d for d in diags if d.severity == "error"]
    assert g is None and [d.code for d in errs] == [code], [d.render() for d in diags]
    d = errs[0]
    line = next(i for i, t in enumerate(f.read_text().splitlines(), 1) if "- system:" in t)
    assert d.span.file == str(f) and d.span.line == line and d.hint, d.render()
    return d


def test_dotdot_escape_is_refused(tmp_path, outside):
    d = one_error(graph(tmp_path, "../../outside/x.j2"), "E007")
    assert "outside the templates folder" in d.message and "templates_outside" in d.hint


def test_absolute_path_is_refused(tmp_path, outside):
    one_error(graph(tmp_path, str(outside / "x.j2")), "E007")


@pytest.mark.parametrize("target", ["outside", "/etc/passwd"])
def test_symlink_out_is_refused(tmp_path, outside, target):
    f = graph(tmp_path, "link.j2")
    (f.parent / "t" / "link.j2").symlink_to(outside / "x.j2" if target == "outside" else target)
    one_error(f, "E007")


def test_symlink_to_dev_zero_is_not_read(tmp_path):
    f = graph(tmp_path, "zero.j2", extra="templates_outside: true\n")
    (f.parent / "t" / "zero.j2").symlink_to("/dev/zero")
    d = one_error(f, "E007")
    assert "not a regular file" in d.message


def test_a_fifo_is_not_opened(tmp_path):
    f = graph(tmp_path, "fifo.j2")
    os.mkfifo(f.parent / "t" / "fifo.j2")
    assert "not a regular file" in one_error(f, "E007").message


def test_an_oversized_template_is_refused(tmp_path):
    f = graph(tmp_path, "big.j2")
    (f.parent / "t" / "big.j2").write_text("x" * (MAX_TEMPLATE_BYTES + 1))
    d = one_error(f, "E007")
    assert f"{MAX_TEMPLATE_BYTES}" in d.message.replace(",", "")


def test_opting_in_allows_outside_templates(tmp_path, outside):
    f = graph(tmp_path, "../../outside/x.j2", extra="templates_outside: true\n")
    g, diags = check_file(f)
    assert g is not None and not [d for d in diags if d.severity == "error"], [d.render() for d in diags]
    assert "SECRET outside text" in plan_json(lower(g))


def test_inside_paths_and_symlinks_inside_still_work(tmp_path):
    f = graph(tmp_path, "sub/p.j2")
    (f.parent / "t" / "sub").mkdir()
    (f.parent / "t" / "sub" / "p.j2").write_text("inside {{ q }}")
    (f.parent / "t" / "alias.j2").symlink_to(f.parent / "t" / "sub" / "p.j2")
    g, diags = check_file(f)
    assert g is not None and "inside {{ q }}" in plan_json(lower(g))
    g2, _ = check_file(graph(tmp_path, "alias.j2"))
    assert g2 is not None
