"""graphrl.spec.diagnostics: the code table, the Diagnostic value, rendering, hints, ordering."""

from __future__ import annotations

import re

import pytest

from graphrl.spec.diagnostics import (
    CODES,
    Diagnostic,
    DiagnosticError,
    SourceCache,
    Span,
    did_you_mean,
    has_errors,
    sort_diagnostics,
)


def test_code_table_shape():
    names = [name for name, _ in CODES.values()]
    assert len(set(names)) == len(names), "names are unique"
    for code, (name, summary) in CODES.items():
        assert re.fullmatch(r"[EW]\d{3}", code), code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name
        assert summary and summary[0].islower() and not summary.endswith(".")
    assert list(CODES) == sorted(CODES, key=lambda c: c[1:]), "codes are listed in numeric order"


def test_unknown_code_is_rejected():
    with pytest.raises(ValueError):
        Diagnostic("E999", "nope")


@pytest.mark.parametrize("code, severity", [("E101", "error"), ("W402", "warning"), ("E001", "error")])
def test_severity_comes_from_the_code(code, severity):
    assert Diagnostic(code, "m").severity == severity


def test_has_errors():
    assert not has_errors([])
    assert not has_errors([Diagnostic("W402", "w"), Diagnostic("W404", "w")])
    assert has_errors([Diagnostic("W402", "w"), Diagnostic("E101", "e")])


def test_span_str():
    assert str(Span("g.yaml", 3, 7)) == "g.yaml:3:7"


def test_render_without_source():
    d = Diagnostic("E101", "edge target 'x' is not a node", Span("g.yaml", 3, 7, 8), "did you mean 'y'?")
    assert d.render() == "g.yaml:3:7: error[E101]: edge target 'x' is not a node\n   = help: did you mean 'y'?"


def test_render_without_span():
    assert Diagnostic("W402", "nothing trained").render() == "warning[W402]: nothing trained"


def test_render_with_source_line_and_caret(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("name: g\nnodes:\n  a:\n    next: nxt_step\n")
    d = Diagnostic("E101", "edge target 'nxt_step' is not a node", Span(str(f), 4, 11, 19), "did you mean 'next_step'?")
    assert d.render(SourceCache()).splitlines() == [
        f"{f}:4:11: error[E101]: edge target 'nxt_step' is not a node",
        " 4 |     next: nxt_step",
        "   |           ^^^^^^^^",
        "   = help: did you mean 'next_step'?",
    ]


def test_render_caret_is_one_wide_without_end(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("x: 1\n")
    lines = Diagnostic("E003", "m", Span(str(f), 1, 4)).render(SourceCache()).splitlines()
    assert lines[-1] == "   |    ^"


def test_render_gutter_widens_with_line_number(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text("\n" * 120 + "bad: 1\n")
    lines = Diagnostic("E002", "unknown key 'bad'", Span(str(f), 121, 1, 4)).render(SourceCache()).splitlines()
    assert lines[1] == " 121 | bad: 1"
    assert lines[2] == "     | ^^^"


def test_render_survives_unreadable_or_short_files(tmp_path):
    cache = SourceCache()
    assert (
        Diagnostic("E007", "m", Span(str(tmp_path / "missing.yaml"), 1, 1)).render(cache)
        == f"{tmp_path / 'missing.yaml'}:1:1: error[E007]: m"
    )
    f = tmp_path / "short.yaml"
    f.write_text("a: 1\n")
    assert Diagnostic("E001", "m", Span(str(f), 9, 1)).render(cache) == f"{f}:9:1: error[E001]: m"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    assert "error[E001]" in Diagnostic("E001", "m", Span(str(binary), 1, 1)).render(cache)


def test_source_cache_add_overrides_disk():
    cache = SourceCache()
    cache.add("virtual.yaml", "one\ntwo\n")
    assert cache.line("virtual.yaml", 2) == "two"
    assert cache.line("virtual.yaml", 0) is None and cache.line("virtual.yaml", 3) is None


def test_to_json():
    d = Diagnostic("E204", "node 'a' has no field 'b'", Span("g.yaml", 2, 3), "did you mean 'c'?")
    assert d.to_json() == {
        "code": "E204",
        "name": "unknown-field",
        "severity": "error",
        "message": "node 'a' has no field 'b'",
        "file": "g.yaml",
        "line": 2,
        "col": 3,
        "hint": "did you mean 'c'?",
    }
    assert Diagnostic("W402", "m").to_json()["file"] is None


@pytest.mark.parametrize(
    "word, candidates, hint",
    [
        ("nxt_step", ["next_step", "plan"], "did you mean 'next_step'?"),
        ("polcy", ["policy"], "did you mean 'policy'?"),
        ("zzz", ["policy", "plan"], None),
        ("x", [], None),
        (5, ["5", "abc"], "did you mean '5'?"),
    ],
)
def test_did_you_mean(word, candidates, hint):
    assert did_you_mean(word, candidates) == hint


def test_did_you_mean_is_deterministic():
    assert did_you_mean("ab", ["ac", "ad", "ae"]) == did_you_mean("ab", ["ae", "ad", "ac"])


def test_sort_and_deduplicate():
    a = Diagnostic("E101", "m", Span("b.yaml", 1, 1))
    b = Diagnostic("E102", "m", Span("a.yaml", 9, 1))
    c = Diagnostic("E101", "m", Span("a.yaml", 2, 5))
    d = Diagnostic("W402", "m")
    assert sort_diagnostics([a, b, c, d, a, c]) == [d, c, b, a]


def test_diagnostic_error_carries_all():
    ds = [Diagnostic("E101", "one"), Diagnostic("E102", "two")]
    err = DiagnosticError(ds)
    assert err.diagnostics == tuple(ds)
    assert "error[E101]: one" in str(err) and "error[E102]: two" in str(err)


def test_diagnostics_are_frozen_and_hashable():
    d = Diagnostic("E101", "m", Span("g", 1, 1))
    with pytest.raises(Exception):
        d.code = "E102"  # type: ignore[misc]
    assert len({d, Diagnostic("E101", "m", Span("g", 1, 1))}) == 1
