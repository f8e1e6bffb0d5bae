"""`graphrl run`: execute a graph over a dataset without training (debugging, evaluation).

Input: a graph (YAML or compiled plan.json), JSONL rows, engine options.
Output: trajectory JSONL (see graphrl.runtime.runner) and a summary table on stdout.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click


def _pairs(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, url = v.partition("=")
        if not sep or not name or not url:
            raise click.BadParameter(f"expected NAME=URL, got {v!r}", param_hint="--endpoint")
        out[name] = url
    return out


@click.command(name="run")
@click.argument("graph", type=click.Path(dir_okay=False))
@click.option("--data", required=True, type=click.Path(dir_okay=False, exists=True), help="JSONL rows: prompt, label, metadata.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Trajectory JSONL (resumed if it exists).")
@click.option("--engine", type=click.Choice(["local", "sglang"]), default="local", show_default=True)
@click.option("--model", default="smollm2", show_default=True, help="local engine: smollm2, tiny, or a HF model dir.")
@click.option("--url", help="sglang engine: the policy's SGLang server, e.g. http://127.0.0.1:30000")
@click.option("--tokenizer", default="qwen", show_default=True, help="sglang engine: tokenizer name or HF dir.")
@click.option("--endpoint", "endpoints", multiple=True, metavar="NAME=URL", help="URL of a model of the graph (repeatable).")
@click.option("--n-samples", default=1, show_default=True, type=click.IntRange(1), help="Samples per prompt (a group).")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1), help="Rollouts in flight.")
@click.option("--limit", type=click.IntRange(1), help="Use only the first N rows.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed base (per rollout: seed + rollout id).")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="Default temperature (nodes may override).")
@click.option("--device", default=None, help="local engine: cpu or cuda (default: cuda when available).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run_command(graph, data, out_path, engine, model, url, tokenizer, endpoints, n_samples, concurrency, limit,
                seed, temperature, device, quiet):
    """Run GRAPH over a dataset and write one JSON line per training sample.

    The embedded default (--engine local --model smollm2) needs no server: every model of the graph
    runs on the local model unless --endpoint NAME=URL says otherwise. Rerunning with the same --out
    resumes an interrupted run.

    \b
    Example:
      graphrl run graphs/hello.yaml --data data/math.jsonl --out out/hello.jsonl --n-samples 2
      graphrl run graphs/agentflow.yaml --data d.jsonl --out t.jsonl --engine sglang --url http://127.0.0.1:30000
    """
    from ..cli import _report
    from ..compilers.plan import plan_from_path

    plan, diags = plan_from_path(graph)
    if plan is None:
        sys.exit(_report([(graph, diags)], False))
    if engine == "sglang" and not url and "policy" not in _pairs(endpoints):
        raise click.UsageError("--engine sglang needs --url (the policy's SGLang server)")
    summary = run_plan(plan, data, out_path, engine=engine, model=model, url=url, tokenizer=tokenizer,
                       endpoints=_pairs(endpoints), n_samples=n_samples, concurrency=concurrency, limit=limit,
                       seed=seed, temperature=temperature, device=device, progress=not quiet)
    click.echo(f"{plan.name}: wrote {out_path}")
    click.echo(summary.table())


def run_plan(plan, data, out_path, *, engine="local", model="smollm2", url=None, tokenizer="qwen", endpoints=None,
             n_samples=1, concurrency=8, limit=None, seed=0, temperature=1.0, device=None, progress=True):
    """Run a plan over a JSONL file; returns the RunSummary. Usage problems raise click.UsageError."""
    from ..engines.factory import WiringError, build_endpoints
    from ..rewards.scorer import RewardBox
    from ..tools.registry import ToolBox
    from .executor import Executor
    from .runner import read_rows, run_dataset

    try:
        rows = read_rows(data, limit)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        eps = build_endpoints(plan, engine=engine, model=model, url=url, tokenizer=tokenizer,
                              endpoints=endpoints or {}, device=device)
    except WiringError as exc:
        raise click.UsageError(str(exc)) from None
    search = [Path(plan.source.get("file", ".")).parent, Path(".")]
    executor = Executor(plan, eps, tools=ToolBox(search), rewards=RewardBox(search),
                        sampling={"temperature": temperature, "top_p": 1.0, "top_k": -1})
    decode = eps.renderer("policy").decode

    async def main():
        try:
            return await run_dataset(executor, rows, out_path, n_samples=n_samples, concurrency=concurrency,
                                     seed=seed, decode=decode, progress=progress)
        finally:
            await eps.close()

    return asyncio.run(main())
