"""Run a plan over a dataset without training (debugging, evaluation): what `graphrl run` calls.

Input: a graph (YAML or compiled plan.json), JSONL rows, engine options; optionally a cap on every
llm node's max_tokens (and the judge's), and metadata set on every row (e.g. a service URL the
graph reads from `metadata`).
Output: trajectory JSONL (see graphrl.runtime.runner) and a summary table on stdout. A graph with a
group reward (reward.group) gets it applied per prompt group (graphrl.rewards.group_run).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..data.jsonl import MAX_LINE_BYTES
from ..errors import UsageProblem
from ..models.registry import MODEL_NAMES, TOKENIZER_ALIASES
from ..plan import Plan
from ..rewards.group_run import group_reward_hook
from ..rewards.scorer import JUDGE_MAX_TOKENS, RewardBox
from ..runtime.executor import Executor
from ..runtime.resume import check_resume
from ..runtime.runner import RunSummary, read_rows, run_dataset
from ..spec.model import LLMNode
from ..tools.registry import ToolBox
from ..tools.sandbox_host import SandboxPolicy, resolve_backend
from .endpoints import DEFAULT_TIMEOUT_S, build_endpoints


def run_plan(
    plan: Plan,
    data: str | Path,
    out_path: str | Path,
    *,
    engine: str = "local",
    model: str = "smollm2",
    url: str | None = None,
    tokenizer: str | None = None,
    endpoints: dict[str, str] | None = None,
    n_samples: int = 1,
    concurrency: int = 8,
    limit: int | None = None,
    seed: int = 0,
    temperature: float = 1.0,
    device: str | None = None,
    progress: bool = True,
    max_tokens_cap: int | None = None,
    metadata: dict[str, Any] | None = None,
    warn: Callable[[str], None] | None = None,
    force: bool = False,
    max_row_bytes: int = MAX_LINE_BYTES,
    engine_timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RunSummary:
    """Run a plan over a JSONL file; returns the RunSummary. Usage problems raise `UsageProblem`.

    The tokenizer: local engine -> the model's own (recorded as the model's name or directory);
    sglang -> `tokenizer`, else what the policy server reports (graphrl.app.tokenizers). An existing
    `out_path` is resumed only with the same settings, or deleted first with `force`."""
    try:
        rows = read_rows(data, limit, max_row_bytes=max_row_bytes)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    if metadata:
        rows, skipped = _with_metadata(rows, metadata)
        if skipped:
            shown = ", ".join(str(i + 1) for i in skipped[:10]) + (", ..." if len(skipped) > 10 else "")
            (warn or print)(
                f"warning: --metadata not applied to {len(skipped)} row(s) of {data} whose metadata is not "
                f"a mapping (row {shown}); their rollouts see the row's own metadata"
            )
    if max_tokens_cap:
        plan = cap_max_tokens(plan, max_tokens_cap)
    if engine == "sglang" and tokenizer is None:
        from .tokenizers import discover_tokenizer

        tokenizer = discover_tokenizer((endpoints or {}).get("policy") or url or "")
    settings = run_settings(
        plan,
        data,
        engine=engine,
        model=model,
        url=url,
        tokenizer=tokenizer,
        n_samples=n_samples,
        seed=seed,
        temperature=temperature,
        max_tokens_cap=max_tokens_cap,
    )
    if force:
        Path(out_path).unlink(missing_ok=True)
    else:
        check_resume(out_path, {"graph": plan.name, "plan_sha256": plan.source.get("sha256"), "run": settings})
    eps = build_endpoints(
        plan,
        engine=engine,
        model=model,
        url=url,
        tokenizer=tokenizer,
        endpoints=endpoints or {},
        device=device,
        timeout_s=engine_timeout_s,
    )
    search = [Path(plan.source.get("file", ".")).parent, Path(".")]
    sandbox = SandboxPolicy.from_env(os.environ)  # GRAPHRL_SANDBOX / GRAPHRL_SANDBOX_STRICT: exit 2 if wrong
    if sandbox.backend == "bubblewrap":
        resolve_backend(sandbox)  # asked for by name: refuse now (exit 2) if it cannot work here
    judge_tokens = min(JUDGE_MAX_TOKENS, max_tokens_cap) if max_tokens_cap else JUDGE_MAX_TOKENS
    executor = Executor(
        plan,
        eps,
        tools=ToolBox(search, sandbox=sandbox),
        rewards=RewardBox(search, judge_max_tokens=judge_tokens),
        sampling={"temperature": temperature, "top_p": 1.0, "top_k": -1},
    )
    decode = eps.renderer("policy").decode
    group_reward = group_reward_hook(plan, rows, search)

    async def main():
        try:
            return await run_dataset(
                executor,
                rows,
                out_path,
                n_samples=n_samples,
                concurrency=concurrency,
                seed=seed,
                decode=decode,
                group_reward=group_reward,
                progress=progress,
                settings=settings,
            )
        finally:
            await executor.close()
            await eps.close()

    return asyncio.run(main())


def run_settings(
    plan: Plan,
    data: str | Path,
    *,
    engine: str,
    model: str,
    url: str | None,
    tokenizer: str | None,
    n_samples: int,
    seed: int,
    temperature: float,
    max_tokens_cap: int | None,
) -> dict[str, Any]:
    """What a trajectory file records under "run" and what resuming it must match (URLs and
    --metadata are left out: servers move between runs; the data file counts by content)."""
    local = engine == "local"
    model_name = (model or "smollm2") if local else (url or "")
    if local and model_name not in MODEL_NAMES:
        model_name = str(Path(model_name).expanduser().resolve())
    tok = model_name if local else (tokenizer or "qwen")
    if not local and tok not in MODEL_NAMES and tok not in TOKENIZER_ALIASES:
        tok = str(Path(tok).expanduser().resolve())
    digest = hashlib.sha256(Path(data).read_bytes()).hexdigest() if Path(data).is_file() else None
    return {
        "engine": engine,
        "model": model_name,
        "tokenizer": tok,
        "n_samples": n_samples,
        "seed": seed,
        "temperature": temperature,
        "max_tokens_cap": max_tokens_cap,
        "data_sha256": digest,
    }


def failed_verdict(summary: RunSummary, max_failed: float | None = None) -> str | None:
    """Why the run counts as failed (exit 5), or None. Default: every rollout of this run failed;
    with `max_failed` F in [0, 1]: more than F of them failed. Resumed groups do not count."""
    failed, total = summary.statuses.get("failed", 0), summary.rollouts
    if not total or not failed:
        return None
    if max_failed is None:
        return f"all {total} rollouts failed" if failed == total else None
    if failed / total > max_failed:
        return f"{failed} of {total} rollouts failed ({failed / total:.0%}, more than --max-failed {max_failed:g})"
    return None


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


def cap_max_tokens(plan: Plan, cap: int) -> Plan:
    """The plan with every llm node's max_tokens clamped to `cap` (its sub-graphs' too)."""
    nodes = {
        nid: n.model_copy(update={"max_tokens": min(n.max_tokens or cap, cap)}) if isinstance(n, LLMNode) else n
        for nid, n in plan.nodes.items()
    }
    children = {nid: cap_max_tokens(child, cap) for nid, child in (plan.subgraphs or {}).items()}
    return plan.model_copy(update={"nodes": nodes, "subgraphs": children or None})
