"""`graphrl visualize`: argv -> a diagram file (or text on stdout) and an exit code.

Input: INPUT (a graph YAML / plan.json, or a trajectory .jsonl / slime .pt), -o OUT and options.
Output: OUT written atomically (a temporary file renamed into place), or text on stdout.
Exit codes: 0 ok; 2 usage (missing file, unknown extension, option that does not fit the input,
unknown --group/--sample); 3 the input has errors (graph diagnostics, a malformed trajectory line,
located as file:line:col); 4 a missing optional dependency (torch for .pt dumps).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from ..spec.diagnostics import SourceCache
from ..viz.build import VizError, graph_output, input_kind, output_format, trajectory_output

FORMATS = ("auto", "svg", "html", "dot", "mermaid", "chrome-trace", "text")


def _write(out: str, text: str) -> None:
    path = Path(out)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@click.command(name="visualize")
@click.argument("input_path", metavar="INPUT", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False),
    help="Output file; its extension picks the format (.svg .html .dot .mmd .json .txt). "
    "Without it, a text preview goes to stdout.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="Override the format: chrome-trace = Trace Event JSON for Perfetto; text = terminal preview.",
)
@click.option(
    "--engine",
    type=click.Choice(["builtin", "graphviz"]),
    default="builtin",
    show_default=True,
    help="Graph SVG/HTML layout: graphrl's own layered layout, or Graphviz `dot` when installed.",
)
@click.option(
    "--graph",
    "graph_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Trajectories: the graph (YAML or plan.json) to draw; default: graphs/<name>.yaml.",
)
@click.option("--group", type=click.IntRange(0), help="Trajectories: only this prompt group (row).")
@click.option("--sample", type=click.IntRange(0), help="Trajectories: only this sample n of the group(s).")
@click.option(
    "--tokenizer",
    default=None,
    help="Token texts: qwen, tiny, smollm2, none (ids), or a local tokenizer directory "
    "(default: the tokenizer the run recorded).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    help="HTML: most token ids kept in the file (default 1,000,000; samples past it list their "
    "spans only). Text: response tokens printed per sample (default 2000).",
)
@click.option("--no-color", is_flag=True, help="Text: no ANSI colours (also when NO_COLOR is set).")
@click.option("--show-prompt", is_flag=True, help="Text: print each sample's prompt too.")
def visualize_command(
    input_path, out, fmt, engine, graph_path, group, sample, tokenizer, max_tokens, no_color, show_prompt
):
    """Draw a graph, or a trajectory of `graphrl run` / slime, as a diagram.

    A graph (.yaml, plan.json) becomes SVG, HTML, Graphviz DOT, Mermaid or text. A trajectory
    (.jsonl from graphrl run, or a slime --save-debug-rollout-data .pt dump: trusted files only,
    they are unpickled) becomes one self-contained HTML file (path taken, waterfall, token strips,
    group table, per-node totals), Chrome trace JSON (Perfetto), or a coloured terminal preview.

    \b
    Example:
      graphrl visualize graphs/agentflow.yaml -o agentflow.svg
      graphrl visualize graphs/agentflow.yaml -o agentflow.mmd
      graphrl run graphs/hello.yaml --data data/math.jsonl --out out/hello.jsonl --n-samples 4
      graphrl visualize out/hello.jsonl -o out/hello.html
      graphrl visualize out/hello.jsonl --group 0 --sample 1          # text preview on stdout
      graphrl visualize out/hello.jsonl -o out/hello.trace.json       # open in ui.perfetto.dev
    """
    t0 = time.monotonic()
    path = Path(input_path)
    try:
        kind = input_kind(path)
        form = output_format(out, fmt, kind)
        if kind == "graph":
            for flag, value in (("--graph", graph_path), ("--group", group), ("--sample", sample)):
                if value is not None:
                    raise VizError(f"{flag} applies to trajectories; {path} is a graph")
            text = graph_output(path, form, engine)
        else:
            color = not no_color and not os.environ.get("NO_COLOR")
            text = trajectory_output(
                path,
                form,
                graph=graph_path,
                group=group,
                sample=sample,
                tokenizer=tokenizer,
                max_tokens=max_tokens,
                color=color,
                show_prompt=show_prompt,
            )
    except VizError as exc:
        if exc.diagnostics:
            sources = SourceCache()
            for d in exc.diagnostics:
                click.echo(d.render(sources) + "\n", err=True)
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.code)
    if out is None:
        click.echo(text, nl=False)
        return
    _write(out, text)
    click.echo(f"wrote {out} ({len(text.encode('utf-8')):,} bytes, {form}) in {time.monotonic() - t0:.2f} s", err=True)
