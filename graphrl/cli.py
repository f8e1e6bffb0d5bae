"""The `graphrl` command line: argv -> exit code.

Exit codes (a contract other tools rely on; docs/errors.md lists them):
  0  success
  1  unexpected failure (a bug: please report it; GRAPHRL_DEBUG=1 shows the traceback)
  2  usage error (bad flags or arguments)
  3  the graph has errors (diagnostics on stderr, or JSON on stdout with --json)
  4  a missing optional dependency (the message names the install command)

Invariant: every command has --help with an example; bad input never prints a Python traceback.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from . import __version__

EXIT_OK, EXIT_BUG, EXIT_USAGE, EXIT_INVALID, EXIT_MISSING_DEP = 0, 1, 2, 3, 4


class MissingDependency(Exception):
    """An optional dependency is not installed; `install` is the command that fixes it."""

    def __init__(self, what: str, install: str):
        super().__init__(f"{what} is not installed")
        self.install = install


class GraphrlGroup(click.Group):
    """Maps known failures to documented exit codes instead of tracebacks."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except MissingDependency as exc:
            click.echo(f"error: {exc}. Install it with:\n  {exc.install}", err=True)
            ctx.exit(EXIT_MISSING_DEP)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            if os.environ.get("GRAPHRL_DEBUG"):
                raise
            name = type(exc).__name__
            if name == "MissingDependency" and hasattr(exc, "install"):
                click.echo(f"error: {exc}. Install it with:\n  {exc.install}", err=True)
                ctx.exit(EXIT_MISSING_DEP)
            click.echo(f"internal error: {name}: {exc}\n"
                       "This is a bug in graphrl; rerun with GRAPHRL_DEBUG=1 for the traceback.", err=True)
            ctx.exit(EXIT_BUG)


@click.group(cls=GraphrlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="graphrl")
def main() -> None:
    """graphrl: declarative agent graphs compiled to slime rollouts.

    \b
    Example:
      graphrl check graphs/*.yaml
      graphrl compile graphs/memagent.yaml -o build/memagent
    """


def _report(results, as_json: bool) -> int:
    from .spec.diagnostics import SourceCache, has_errors

    failed = any(has_errors(d) for _, d in results)
    if as_json:
        click.echo(json.dumps({"ok": not failed, "files": [
            {"file": f, "ok": not has_errors(d), "diagnostics": [x.to_json() for x in d]} for f, d in results
        ]}, indent=2))
    else:
        sources = SourceCache()
        for f, diags in results:
            for d in diags:
                click.echo(d.render(sources) + "\n", err=True)
            errors = sum(d.severity == "error" for d in diags)
            warnings = len(diags) - errors
            status = "ok" if not errors else "FAILED"
            click.echo(f"{f}: {status} ({errors} error{'s' * (errors != 1)}, "
                       f"{warnings} warning{'s' * (warnings != 1)})", err=True)
    return EXIT_INVALID if failed else EXIT_OK


@main.command()
@click.argument("graphs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print diagnostics as JSON on stdout.")
def check(graphs: tuple[str, ...], as_json: bool) -> None:
    """Check graph files statically; report every problem at once.

    Exit 0 when all graphs are valid (warnings allowed), 3 when any has an error.

    \b
    Example:
      graphrl check graphs/agentflow.yaml graphs/memagent.yaml
      graphrl check --json graphs/hello.yaml | jq '.files[].diagnostics'
    """
    from .compilers.checks import check_file

    results = [(g, check_file(g)[1]) for g in graphs]
    sys.exit(_report(results, as_json))


@main.command(name="compile")
@click.argument("graph", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Output directory (created if missing).")
@click.option("--json", "as_json", is_flag=True, help="Print diagnostics as JSON on stdout.")
def compile_(graph: str, out_dir: str, as_json: bool) -> None:
    """Check a graph and compile it for slime into OUT.

    Writes OUT/plan.json (the frozen plan), OUT/graphrl_<name>.py (slime's generate / reward
    functions), OUT/slime_args.yaml, OUT/launch.sh, OUT/README.md (+ OUT/sglang_config.yaml when
    slime serves frozen models).

    \b
    Example:
      graphrl compile graphs/memagent.yaml -o build/memagent
    """
    from .compilers.checks import check_file
    from .compilers.lower import lower
    from .spec.diagnostics import has_errors

    g, diags = check_file(graph)
    if g is None or has_errors(diags):
        sys.exit(_report([(graph, diags)], as_json))
    if diags:
        _report([(graph, diags)], as_json)
    from .compilers.slime.emit import write_slime_target

    written = write_slime_target(lower(g), out_dir)
    if not as_json:
        click.echo("wrote " + ", ".join(str(p) for p in written))


@main.command()
@click.option("-o", "--out", "out_file", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
def schema(out_file: str | None) -> None:
    """Print the JSON Schema of graph files (for editors).

    Point YAML editors at it with a modeline on the first line of a graph:

    \b
      # yaml-language-server: $schema=../docs/graph.schema.json
    Example:
      graphrl schema -o docs/graph.schema.json
    """
    from .spec.schema import graph_json_schema

    text = json.dumps(graph_json_schema(), indent=2, sort_keys=True) + "\n"
    if out_file:
        Path(out_file).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


@main.command()
@click.option("--graphs-dir", default="graphs", show_default=True, type=click.Path(file_okay=False))
@click.option("--data-dir", default="data", show_default=True, type=click.Path(file_okay=False),
              help="The demo data (math.jsonl, toolorchestra.jsonl, corpus.jsonl).")
@click.option("--out", "out_dir", default="build", show_default=True, type=click.Path(file_okay=False))
@click.option("--model", default="smollm2", show_default=True,
              help="Embedded model: the policy and every frozen model (tiny: random weights, fast).")
@click.option("--max-new-tokens-cap", "max_tokens_cap", default=64, show_default=True, type=click.IntRange(1),
              help="Clamp every llm call's max new tokens (keeps the demo to minutes on a CPU).")
@click.option("--only", multiple=True, metavar="GRAPH", help="Run only this graph (repeatable); all are compiled.")
@click.option("--no-run", is_flag=True, help="Check and compile only.")
@click.option("--jobs", type=click.IntRange(1), help="Runs at a time (default: 2 where there are 2 CPUs).")
def demo(graphs_dir: str, data_dir: str, out_dir: str, model: str, max_tokens_cap: int, only: tuple[str, ...],
         no_run: bool, jobs: int | None) -> None:
    """The main job on the embedded default: check and compile every bundled graph, then run each
    one over its demo data with the local engine (ToolOrchestra against an embedded BM25 retrieval
    service), write trajectories under OUT/<graph>/ and print each run's summary. No server to start.

    \b
    Example:
      graphrl demo --out build
      graphrl demo --only toolorchestra --model tiny
    """
    from .demo import run_demo

    code = run_demo(graphs_dir=graphs_dir, data_dir=data_dir, out_dir=out_dir, model=model,
                    max_tokens_cap=max_tokens_cap, only=only, run=not no_run, jobs=jobs)
    if code:
        sys.exit(code)


def _register_optional() -> None:
    """Commands from other stages, added when their modules exist."""
    import importlib

    for module, attr in (("graphrl.engines.server_cli", "serve_command"),
                         ("graphrl.models.cli", "models_command"),
                         ("graphrl.runtime.cli_run", "run_command"),
                         ("graphrl.viz.cli", "visualize_command"),
                         ("graphrl.compilers.slime.launch", "launch_command"),
                         ("graphrl.tools.retrieval_server", "serve_retrieval_command")):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        main.add_command(getattr(mod, attr))


_register_optional()

if __name__ == "__main__":
    main()
