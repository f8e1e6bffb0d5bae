"""`graphrl run`: execute a graph over a dataset without training (see `graphrl.app.run`)."""

from __future__ import annotations

import sys

import click

from ..app.endpoints import DEFAULT_TIMEOUT_S
from ..app.run import failed_verdict, run_plan
from ..compilers.lower import plan_from_path
from ..data.jsonl import MAX_LINE_BYTES
from ..errors import RolloutsFailed
from ._common import key_values, print_report


def parse_metadata(values: tuple[str, ...]) -> dict[str, object]:
    """`--metadata KEY=VALUE` options -> {KEY: VALUE as JSON when it parses, else the string}."""
    return key_values(values, "--metadata", json_values=True)


@click.command(name="run")
@click.argument("graph", type=click.Path(dir_okay=False))
@click.option(
    "--data", required=True, type=click.Path(dir_okay=False, exists=True), help="JSONL rows: prompt, label, metadata."
)
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Trajectory JSONL (resumed if it exists and was written with the same settings).",
)
@click.option("--force", is_flag=True, help="Overwrite --out instead of resuming it.")
@click.option("--engine", type=click.Choice(["local", "sglang"]), default="local", show_default=True)
@click.option("--model", default="smollm2", show_default=True, help="local engine: smollm2, tiny, or a HF model dir.")
@click.option("--url", help="sglang engine: the policy's SGLang server, e.g. http://127.0.0.1:30000")
@click.option(
    "--tokenizer",
    default=None,
    help="sglang engine: qwen, tiny, smollm2 or a tokenizer directory (default: what the policy "
    "server's /get_model_info reports).",
)
@click.option(
    "--endpoint", "endpoints", multiple=True, metavar="NAME=URL", help="URL of a model of the graph (repeatable)."
)
@click.option("--n-samples", default=1, show_default=True, type=click.IntRange(1), help="Samples per prompt (a group).")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1), help="Rollouts in flight.")
@click.option("--limit", type=click.IntRange(1), help="Use only the first N rows.")
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Sampling seed base (per rollout: seed + rollout id)."
)
@click.option(
    "--temperature", type=float, default=1.0, show_default=True, help="Default temperature (nodes may override)."
)
@click.option("--device", default=None, help="local engine: cpu or cuda (default: cuda when available).")
@click.option(
    "--max-new-tokens-cap",
    "max_tokens_cap",
    type=click.IntRange(1),
    help="Clamp every llm node's max_tokens (and the judge's) to N: quick looks with slow models.",
)
@click.option(
    "--metadata",
    "metadata",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set metadata.KEY on every row (VALUE as JSON when it parses, else a string; repeatable).",
)
@click.option(
    "--max-row-bytes",
    type=click.IntRange(1),
    default=MAX_LINE_BYTES,
    show_default=True,
    help="Refuse data rows (JSONL lines) longer than this, before reading them whole.",
)
@click.option(
    "--engine-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds one HTTP engine request may take (a model's timeout_s wins).",
)
@click.option(
    "--max-failed",
    type=click.FloatRange(0, 1),
    metavar="FRACTION",
    help="Exit 5 when more than this fraction of the rollouts failed (default: only when all failed).",
)
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run_command(
    graph,
    data,
    out_path,
    force,
    engine,
    model,
    url,
    tokenizer,
    endpoints,
    n_samples,
    concurrency,
    limit,
    seed,
    temperature,
    device,
    max_tokens_cap,
    metadata,
    max_row_bytes,
    engine_timeout,
    max_failed,
    quiet,
):
    """Run GRAPH over a dataset and write one JSON line per training sample.

    The embedded default (--engine local --model smollm2) needs no server: every model of the graph
    runs on the local model unless --endpoint NAME=URL says otherwise. Rerunning with the same --out
    and the same settings resumes an interrupted run; other settings are refused (exit 2) unless
    --force. Exit 5 when every rollout failed (or more than --max-failed of them).

    \b
    Example:
      graphrl run graphs/hello.yaml --data data/math.jsonl --out out/hello.jsonl --n-samples 2
      graphrl run graphs/agentflow.yaml --data d.jsonl --out t.jsonl --engine sglang --url http://127.0.0.1:30000
      graphrl run graphs/toolorchestra.yaml --data data/toolorchestra.jsonl --out to.jsonl \\
          --metadata retrieval_url=http://127.0.0.1:8000 --max-new-tokens-cap 64
    """
    plan, diags = plan_from_path(graph)
    if plan is None:
        sys.exit(print_report([(graph, diags)]))
    urls = key_values(endpoints, "--endpoint", "NAME=URL")
    if engine == "sglang" and not url and "policy" not in urls:
        raise click.UsageError("--engine sglang needs --url (the policy's SGLang server)")
    summary = run_plan(
        plan,
        data,
        out_path,
        engine=engine,
        model=model,
        url=url,
        tokenizer=tokenizer,
        endpoints=urls,
        n_samples=n_samples,
        concurrency=concurrency,
        limit=limit,
        seed=seed,
        temperature=temperature,
        device=device,
        progress=not quiet,
        max_tokens_cap=max_tokens_cap,
        metadata=parse_metadata(metadata),
        warn=lambda s: click.echo(s, err=True),
        force=force,
        max_row_bytes=max_row_bytes,
        engine_timeout_s=engine_timeout,
    )
    click.echo(f"{plan.name}: wrote {out_path}")
    click.echo(summary.table())
    verdict = failed_verdict(summary, max_failed)
    if verdict:
        raise RolloutsFailed(f"{verdict}; the summary above lists the errors (exit 5)")
