"""The invalid-graph corpus: every fixture states the diagnostics it must produce.

Each file in tests/fixtures/invalid/ starts with header comments:

    # expect: E101 at 12:15                  a diagnostic in the fixture itself (line:col, 1-based)
    # expect: E201 at prompts/broken.j2:4:1  a diagnostic in another file (relative to the fixture)
    # expect-hint: did you mean 'next_step'?  some diagnostic carries exactly this hint

The produced (code, file, line, col) multiset must equal the expected one exactly: no missing and no
extra diagnostics. Helper modules for E303/E304 (fixture_tools.py) and templates (prompts/) sit next
to the fixtures, because user code and template files are resolved relative to the graph.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from graphrl.compilers.checks import check_file
from graphrl.spec.diagnostics import CODES, Diagnostic, has_errors

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "invalid"
FIXTURES = sorted(CORPUS.glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (?P<code>[EW]\d{3}) at (?:(?P<file>[^\s:]+):)?(?P<line>\d+):(?P<col>\d+)\s*$")
EXPECT_HINT = re.compile(r"^# expect-hint: (?P<hint>.+?)\s*$")


def expectations(path: Path) -> tuple[Counter, list[str]]:
    diags: Counter = Counter()
    hints: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        if m := EXPECT.match(line):
            file = (path.parent / m["file"]).resolve() if m["file"] else path.resolve()
            diags[(m["code"], str(file), int(m["line"]), int(m["col"]))] += 1
        elif m := EXPECT_HINT.match(line):
            hints.append(m["hint"])
        elif line.startswith("# expect"):
            raise AssertionError(f"{path.name}: malformed expectation line: {line!r}")
    return diags, hints


def produced(diags: list[Diagnostic]) -> Counter:
    out: Counter = Counter()
    for d in diags:
        assert d.span is not None, f"diagnostic without a location: {d}"
        out[(d.code, str(Path(d.span.file).resolve()), d.span.line, d.span.col)] += 1
    return out


def _show(c: Counter) -> list[str]:
    return sorted(
        f"{code} at {Path(f).name}:{line}:{col}" + (f" x{n}" if n > 1 else "") for (code, f, line, col), n in c.items()
    )


def test_corpus_is_there():
    assert len(FIXTURES) >= 40


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_fixture_produces_exactly_the_expected_diagnostics(fixture: Path):
    expected, hints = expectations(fixture)
    assert expected, f"{fixture.name} has no '# expect:' header"
    _, diags = check_file(fixture)
    got = produced(diags)
    assert got == expected, f"{fixture.name}\n  expected: {_show(expected)}\n  got:      {_show(got)}\n" + "\n".join(
        d.render() for d in diags
    )
    got_hints = [d.hint for d in diags if d.hint]
    for hint in hints:
        assert hint in got_hints, f"{fixture.name}: no diagnostic has hint {hint!r}; hints: {got_hints}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_fixture_name_matches_its_codes(fixture: Path):
    """E101_foo.yaml expects E101 (and a W-named fixture holds only warnings)."""
    m = re.match(r"^([EW]\d{3})_", fixture.name)
    if not m:
        assert fixture.name.startswith("multi_"), f"fixture {fixture.name} should be named CODE_what.yaml"
        return
    expected, _ = expectations(fixture)
    codes = {code for code, *_ in expected}
    assert m[1] in codes
    if m[1].startswith("W"):
        assert codes == {m[1]}


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_errors_fail_and_warnings_pass(fixture: Path):
    expected, _ = expectations(fixture)
    _, diags = check_file(fixture)
    assert has_errors(diags) == any(code.startswith("E") for code, *_ in expected)


def test_every_code_has_a_fixture():
    covered = set()
    for f in FIXTURES:
        covered |= {code for code, *_ in expectations(f)[0]}
    assert sorted(set(CODES) - covered) == []


def test_important_codes_have_several_fixtures():
    counts: Counter = Counter()
    for f in FIXTURES:
        for code in {code for code, *_ in expectations(f)[0]}:
            counts[code] += 1
    for code in ("E002", "E003", "E101", "E105", "E201", "E202", "E303", "E304"):
        assert counts[code] >= 2, code


def test_template_file_errors_point_into_the_template():
    """E201/E202 in a .j2 file are located in that file at the template's own line."""
    _, diags = check_file(CORPUS / "E201_template_file.yaml")
    (d,) = diags
    assert Path(d.span.file).name == "broken.j2" and d.span.line == 4
    _, diags = check_file(CORPUS / "E202_template_file.yaml")
    (d,) = diags
    assert Path(d.span.file).name == "unbound.j2" and (d.span.line, d.span.col, d.span.end_col) == (4, 10, 14)


def test_rendering_of_a_corpus_diagnostic():
    f = CORPUS / "E101_unknown_target.yaml"
    _, diags = check_file(f)
    (d,) = diags
    text = d.render(__import__("graphrl.spec.diagnostics", fromlist=["SourceCache"]).SourceCache())
    lines = text.splitlines()
    assert lines[0] == f"{f}:13:15: error[E101]: edge target 'nxt_step' is not a node"
    assert lines[1] == " 13 |         goto: nxt_step"
    assert lines[2] == "    |               ^^^^^^^^"
    assert lines[3] == "   = help: did you mean 'next_step'?"


# ---------------------------------------------------------------- all at once


def test_all_diagnostics_of_a_bad_graph_are_reported_at_once():
    _, diags = check_file(CORPUS / "multi_error.yaml")
    codes = {d.code for d in diags}
    assert codes >= {"E002", "E101", "E102", "E103", "E104", "E202", "E301", "E302", "E305"}
    assert diags == sorted(diags, key=Diagnostic.sort_key), "diagnostics come sorted by location"


def test_schema_level_problems_are_reported_at_once():
    _, diags = check_file(CORPUS / "multi_error_schema.yaml")
    assert Counter(d.code for d in diags) == Counter({"E003": 3, "E006": 1, "E002": 1})


def test_unknown_keys_do_not_hide_later_checks(tmp_path: Path):
    """An unknown key is reported together with graph-level errors of the same file."""
    f = tmp_path / "g.yaml"
    f.write_text("name: g\nnodes:\n  a:\n    llm: policy\n    prompt: hi\n    colour: red\n    next: b\n")
    g, diags = check_file(f)
    assert g is not None
    assert [(d.code, d.span.line) for d in diags] == [("E002", 6), ("E101", 7)]
