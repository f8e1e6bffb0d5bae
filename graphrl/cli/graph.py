"""`graphrl check`, `graphrl compile`, `graphrl schema`: graph files -> diagnostics, compiled targets, the schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..compilers.checks import check_file
from ..compilers.lower import lower
from ..compilers.targets import TARGETS, find_target, sections
from ..spec.diagnostics import has_errors
from ..spec.schema import graph_json_schema
from ._common import print_report


@click.command()
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
    results = [(g, check_file(g)[1]) for g in graphs]
    sys.exit(print_report(results, as_json))


@click.command(name="compile")
@click.argument("graph", type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Output directory (created if missing).",
)
@click.option("--json", "as_json", is_flag=True, help="Print diagnostics as JSON on stdout.")
@click.option(
    "--target",
    "target_name",
    default="slime",
    show_default=True,
    type=click.Choice([t.name for t in TARGETS]),
    help="The compile target.",
)
def compile_(graph: str, out_dir: str, as_json: bool, target_name: str) -> None:
    """Check a graph and compile it for a training framework (slime) into OUT.

    Writes OUT/plan.json (the frozen plan), OUT/graphrl_<name>.py (slime's generate / reward
    functions), OUT/slime_args.yaml, OUT/launch.sh, OUT/README.md (+ OUT/sglang_config.yaml when
    slime serves frozen models).

    \b
    Example:
      graphrl compile graphs/memagent.yaml -o build/memagent
    """
    g, diags = check_file(graph)
    if g is None or has_errors(diags):
        sys.exit(print_report([(graph, diags)], as_json))
    if diags:
        print_report([(graph, diags)], as_json)
    written = find_target(target_name).emit(lower(g), Path(out_dir))
    if not as_json:
        click.echo("wrote " + ", ".join(str(p) for p in written))


@click.command()
@click.option("-o", "--out", "out_file", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
def schema(out_file: str | None) -> None:
    """Print the JSON Schema of graph files (for editors).

    Point YAML editors at it with a modeline on the first line of a graph:

    \b
      # yaml-language-server: $schema=../docs/graph.schema.json
    Example:
      graphrl schema -o docs/graph.schema.json
    """
    text = json.dumps(graph_json_schema(sections(TARGETS)), indent=2, sort_keys=True) + "\n"
    if out_file:
        Path(out_file).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
