"""`graphrl demo`: the README's main job on the embedded default (see `graphrl.app.demo`)."""

from __future__ import annotations

import sys

import click

from ..app.demo import run_demo


@click.command()
@click.option("--graphs-dir", default="graphs", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--data-dir",
    default="data",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The demo data (math.jsonl, toolorchestra.jsonl, corpus.jsonl).",
)
@click.option("--out", "out_dir", default="build", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--model",
    default="smollm2",
    show_default=True,
    help="Embedded model: the policy and every frozen model (tiny: random weights, fast).",
)
@click.option(
    "--max-new-tokens-cap",
    "max_tokens_cap",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Clamp every llm call's max new tokens (keeps the demo to minutes on a CPU).",
)
@click.option("--only", multiple=True, metavar="GRAPH", help="Run only this graph (repeatable); all are compiled.")
@click.option("--no-run", is_flag=True, help="Check and compile only.")
@click.option("--jobs", type=click.IntRange(1), help="Runs at a time (default: 2 where there are 2 CPUs).")
def demo(
    graphs_dir: str,
    data_dir: str,
    out_dir: str,
    model: str,
    max_tokens_cap: int,
    only: tuple[str, ...],
    no_run: bool,
    jobs: int | None,
) -> None:
    """The main job on the embedded default: check and compile every bundled graph, then run each
    one over its demo data with the local engine (ToolOrchestra against an embedded BM25 retrieval
    service), write trajectories under OUT/<graph>/ and print each run's summary. No server to start.

    \b
    Example:
      graphrl demo --out build
      graphrl demo --only toolorchestra --model tiny
    """
    code = run_demo(
        graphs_dir=graphs_dir,
        data_dir=data_dir,
        out_dir=out_dir,
        model=model,
        max_tokens_cap=max_tokens_cap,
        only=only,
        run=not no_run,
        jobs=jobs,
        echo=click.echo,
        echo_err=lambda s: click.echo(s, err=True),
    )
    if code:
        sys.exit(code)
