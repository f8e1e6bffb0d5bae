"""The `graphrl` command line: argv -> exit code. Thin commands over library functions.

Exit codes (a contract other tools rely on; docs/errors.md lists them):
  0  success
  1  unexpected failure (a bug: please report it; GRAPHRL_DEBUG=1 shows the traceback)
  2  usage error (bad flags, arguments or input files)
  3  the graph has errors (diagnostics on stderr, or JSON on stdout with --json)
  4  a missing optional dependency (the message names the install command)

Invariants: every command is registered here, by name, in `COMMANDS`, and imported only when it is
run or listed; a command whose module fails to import is still listed and says why when run (exit 4),
never vanishes. Library errors carry their exit code (`graphrl.errors.GraphrlError`); this package
is the one place they become exit codes. Nothing below the CLI imports it.
"""

from __future__ import annotations

import importlib
import os

import click

from .. import __version__
from ..errors import EXIT_BUG, EXIT_INVALID, EXIT_MISSING_DEP, EXIT_OK, EXIT_USAGE, GraphrlError, MissingDependency

__all__ = [
    "COMMANDS",
    "EXIT_BUG",
    "EXIT_INVALID",
    "EXIT_MISSING_DEP",
    "EXIT_OK",
    "EXIT_USAGE",
    "MissingDependency",
    "main",
]

# command name -> "module:attribute" of its click command, in the order `--help` lists them
COMMANDS: dict[str, str] = {
    "check": "graphrl.cli.graph:check",
    "compile": "graphrl.cli.graph:compile_",
    "schema": "graphrl.cli.graph:schema",
    "run": "graphrl.cli.run:run_command",
    "demo": "graphrl.cli.demo:demo",
    "visualize": "graphrl.cli.visualize:visualize_command",
    "launch": "graphrl.cli.launch:launch_command",
    "serve": "graphrl.cli.serve:serve_command",
    "serve-retrieval": "graphrl.cli.serve:serve_retrieval_command",
    "models": "graphrl.cli.models:models_command",
    "doctor": "graphrl.cli.doctor:doctor_command",
}


def _unavailable(name: str, exc: BaseException) -> click.Command:
    """Stands in for a command whose module cannot be imported: says why, exits 4."""

    def run() -> None:
        click.echo(f"error: `graphrl {name}` is unavailable here: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(EXIT_MISSING_DEP)

    return click.Command(
        name,
        callback=run,
        help=f"(unavailable: {exc})",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class GraphrlGroup(click.Group):
    """Commands from `COMMANDS`, imported lazily; known failures become documented exit codes."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*COMMANDS, *(c for c in self.commands if c not in COMMANDS)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:  # added with add_command (plugins, tests)
            return self.commands[cmd_name]
        ref = COMMANDS.get(cmd_name)
        if ref is None:
            return None
        module, _, attr = ref.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            return _unavailable(cmd_name, exc)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except MissingDependency as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_MISSING_DEP)
        except GraphrlError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:
            if os.environ.get("GRAPHRL_DEBUG"):
                raise
            click.echo(
                f"internal error: {type(exc).__name__}: {exc}\n"
                "This is a bug in graphrl; rerun with GRAPHRL_DEBUG=1 for the traceback.",
                err=True,
            )
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
