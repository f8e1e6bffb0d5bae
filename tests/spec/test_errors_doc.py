"""docs/errors.md matches the code: every code in CODES has a section (and no other code does), the
summary table and the exit-code table agree with the code, and each section's example graph really
produces its code."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import graphrl.cli as cli
from graphrl.compilers.checks import check_file
from graphrl.spec.diagnostics import CODES

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "errors.md"
TEXT = DOC.read_text(encoding="utf-8")
HEADING = re.compile(r"^## ([EW]\d{3}) (\S+)\s*$", re.M)


def sections() -> dict[str, tuple[str, str]]:
    """code -> (name, body up to the next heading)."""
    out = {}
    matches = list(HEADING.finditer(TEXT))
    for m, nxt in zip(matches, matches[1:] + [None]):
        out[m[1]] = (m[2], TEXT[m.end() : nxt.start() if nxt else len(TEXT)])
    return out


def test_every_code_has_a_heading_and_every_heading_is_a_code():
    documented = [m[1] for m in HEADING.finditer(TEXT)]
    assert len(documented) == len(set(documented)), "a code is documented twice"
    assert sorted(documented) == sorted(CODES)
    assert documented == list(CODES), "sections follow the order of CODES"


def test_headings_carry_the_code_names():
    for code, (name, _) in sections().items():
        assert name == CODES[code][0], code


def test_summary_table_matches_codes():
    rows = re.findall(r"^\| ([EW]\d{3}) \| (\S+) \| (error|warning) \| (.+?) \|$", TEXT, re.M)
    assert [(c, n, s, summary) for c, n, s, summary in rows] == [
        (code, name, "warning" if code.startswith("W") else "error", summary) for code, (name, summary) in CODES.items()
    ]


def test_exit_code_table_matches_the_cli():
    rows = dict(re.findall(r"^\| (\d+) \| (.+?) \|$", TEXT, re.M))
    assert {int(k) for k in rows} >= {cli.EXIT_OK, cli.EXIT_BUG, cli.EXIT_USAGE, cli.EXIT_INVALID, cli.EXIT_MISSING_DEP}
    for code, line in re.findall(r"^  (\d)  (.+)$", cli.__doc__, re.M):
        first_word = line.split()[0].strip(":(").lower()
        assert first_word in rows[code].lower(), (code, line, rows[code])


def test_every_section_has_trigger_example_and_fix():
    for code, (_, body) in sections().items():
        assert "**Triggered by**" in body, code
        assert "```yaml" in body, code
        assert "**Fix**" in body, code


def test_render_format_is_documented():
    assert "path:line:col: severity[CODE]: message" in TEXT
    assert "= help:" in TEXT and "did you mean" in TEXT


@pytest.mark.parametrize("code", list(CODES))
def test_the_example_produces_its_code(code, tmp_path):
    _, body = sections()[code]
    example = re.search(r"```yaml\n(.*?)```", body, re.S)[1]
    f = tmp_path / f"{code}.yaml"
    f.write_text(example, encoding="utf-8")
    # examples that name a template file (W406's chat template) find the invalid corpus's prompts
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "invalid" / "prompts", tmp_path / "prompts")
    # and the sub-graph examples (E312-E315) its sub-graph files
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "invalid" / "subgraphs", tmp_path / "subgraphs")
    _, diags = check_file(f)
    assert code in {d.code for d in diags}, [d.render() for d in diags]
    others = {d.code for d in diags if d.severity == "error"} - {code}
    assert all(other in body for other in others), f"{code}'s example also gives {others}: say so"
    quoted = re.findall(rf"`(?:error|warning)\[{code}\]: (.+?)`", body)
    for message in quoted:
        assert message in {d.message for d in diags}, (message, [d.message for d in diags])
