"""`graphrl run`: execute a graph over a dataset without training (debugging, evaluation).

Input: a graph (YAML or compiled plan.json), JSONL rows, engine options; optionally a cap on every
llm node's max_tokens (and the judge's), and metadata set on every row (e.g. a service URL the
graph reads from `metadata`).
Output: trajectory JSONL (see graphrl.runtime.runner) and a summary table on stdout. A graph with a
group reward (reward.group) gets it applied per prompt group (graphrl.rewards.group_run).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click


def _metadata(values: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for v in values:
        key, sep, raw = v.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {v!r}", param_hint="--metadata")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


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
@click.option("--max-new-tokens-cap", "max_tokens_cap", type=click.IntRange(1),
              help="Clamp every llm node's max_tokens (and the judge's) to N: quick looks with slow models.")
@click.option("--metadata", "metadata", multiple=True, metavar="KEY=VALUE",
              help="Set metadata.KEY on every row (VALUE as JSON when it parses, else a string; repeatable).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def run_command(graph, data, out_path, engine, model, url, tokenizer, endpoints, n_samples, concurrency, limit,
                seed, temperature, device, max_tokens_cap, metadata, quiet):
    """Run GRAPH over a dataset and write one JSON line per training sample.

    The embedded default (--engine local --model smollm2) needs no server: every model of the graph
    runs on the local model unless --endpoint NAME=URL says otherwise. Rerunning with the same --out
    resumes an interrupted run.

    \b
    Example:
      graphrl run graphs/hello.yaml --data data/math.jsonl --out out/hello.jsonl --n-samples 2
      graphrl run graphs/agentflow.yaml --data d.jsonl --out t.jsonl --engine sglang --url http://127.0.0.1:30000
      graphrl run graphs/toolorchestra.yaml --data data/toolorchestra.jsonl --out to.jsonl \\
          --metadata retrieval_url=http://127.0.0.1:8000 --max-new-tokens-cap 64
    """
    from ..cli import _report
    from ..compilers.lower import plan_from_path

    plan, diags = plan_from_path(graph)
    if plan is None:
        sys.exit(_report([(graph, diags)], False))
    if engine == "sglang" and not url and "policy" not in _pairs(endpoints):
        raise click.UsageError("--engine sglang needs --url (the policy's SGLang server)")
    summary = run_plan(plan, data, out_path, engine=engine, model=model, url=url, tokenizer=tokenizer,
                       endpoints=_pairs(endpoints), n_samples=n_samples, concurrency=concurrency, limit=limit,
                       seed=seed, temperature=temperature, device=device, progress=not quiet,
                       max_tokens_cap=max_tokens_cap, metadata=_metadata(metadata))
    click.echo(f"{plan.name}: wrote {out_path}")
    click.echo(summary.table())


def run_plan(plan, data, out_path, *, engine="local", model="smollm2", url=None, tokenizer="qwen", endpoints=None,
             n_samples=1, concurrency=8, limit=None, seed=0, temperature=1.0, device=None, progress=True,
             max_tokens_cap=None, metadata=None):
    """Run a plan over a JSONL file; returns the RunSummary. Usage problems raise click.UsageError."""
    from ..engines.factory import WiringError, build_endpoints
    from ..rewards.group_run import group_reward_hook
    from ..rewards.scorer import JUDGE_MAX_TOKENS, RewardBox
    from ..tools.registry import ToolBox
    from .executor import Executor
    from .runner import read_rows, run_dataset

    try:
        rows = read_rows(data, limit)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if metadata:
        rows, skipped = _with_metadata(rows, metadata)
        if skipped:
            shown = ", ".join(str(i + 1) for i in skipped[:10]) + (", ..." if len(skipped) > 10 else "")
            click.echo(f"warning: --metadata not applied to {len(skipped)} row(s) of {data} whose metadata is not "
                       f"a mapping (row {shown}); their rollouts see the row's own metadata", err=True)
    if max_tokens_cap:
        plan = cap_max_tokens(plan, max_tokens_cap)
    try:
        eps = build_endpoints(plan, engine=engine, model=model, url=url, tokenizer=tokenizer,
                              endpoints=endpoints or {}, device=device)
    except WiringError as exc:
        raise click.UsageError(str(exc)) from None
    search = [Path(plan.source.get("file", ".")).parent, Path(".")]
    judge_tokens = min(JUDGE_MAX_TOKENS, max_tokens_cap) if max_tokens_cap else JUDGE_MAX_TOKENS
    executor = Executor(plan, eps, tools=ToolBox(search), rewards=RewardBox(search, judge_max_tokens=judge_tokens),
                        sampling={"temperature": temperature, "top_p": 1.0, "top_k": -1})
    decode = eps.renderer("policy").decode
    group_reward = group_reward_hook(plan, rows, search)

    async def main():
        try:
            return await run_dataset(executor, rows, out_path, n_samples=n_samples, concurrency=concurrency,
                                     seed=seed, decode=decode, group_reward=group_reward, progress=progress)
        finally:
            await executor.close()
            await eps.close()

    return asyncio.run(main())


def _with_metadata(rows: list[dict], extra: dict[str, object]) -> tuple[list[dict], list[int]]:
    """Rows with `extra` merged into their metadata; rows whose metadata is not a mapping (nor
    missing/null) are kept as they are -- a bad row must not stop the run -- and their indexes returned."""
    out, skipped = [], []
    for i, row in enumerate(rows):
        meta = row.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            skipped.append(i)
            out.append(row)
        else:
            out.append({**row, "metadata": {**(meta or {}), **extra}})
    return out, skipped


def cap_max_tokens(plan, cap: int):
    """The plan with every llm node's max_tokens clamped to `cap`."""
    from ..spec.model import LLMNode

    nodes = {nid: n.model_copy(update={"max_tokens": min(n.max_tokens, cap)}) if isinstance(n, LLMNode) else n
             for nid, n in plan.nodes.items()}
    return plan.model_copy(update={"nodes": nodes})
