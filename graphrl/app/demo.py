"""The demo: the README's main job on the embedded default, start to end, no server by hand.

Input: the bundled graphs (graphs/*.yaml and graphs/examples/*.yaml), the demo data (data/), the embedded model name, a cap on
every llm call's new tokens. Output, under OUT/<graph>/: the compiled slime target (plan.json, the
generate/reward module, args, launch.sh) and, for each run, trajectories.jsonl; on stdout each
graph's check line then its compile line, each run's summary table and the branches it took
(graphrl.app.branches: each branching node's targets with counts, the node kinds that ran), then
the time of every run.

The runs (`DEMO_RUNS`), all on the local engine (the one embedded model is the policy and every
frozen model of the graph), two at a time by default:
  agentflow      data/math.jsonl, 1 row (planner / executor / verifier loop, sandboxed python)
  memagent       1 synthetic row (graphrl.data.synth, ~11k tokens: three 5,000-token chunks)
  toolorchestra  data/toolorchestra.jsonl, 2 rows x 2 samples (a group: the preference reward),
                 against the embedded BM25 retrieval service over data/corpus.jsonl, started here
                 on a free port and handed to the graph as metadata.retrieval_url
  search_r1      data/search_r1.jsonl, 2 rows (search results inside the response), against the
                 same retrieval service
  retool         data/retool.jsonl, 2 rows (interpreter output inside the response, one sandboxed
                 python session per rollout)
  multi_agent    data/multi_agent.jsonl, 1 row (3 parallel solvers, 3 rewriters, a selector: every
                 call its own sample with its own reward)
  tau_retail     data/tau_retail.jsonl, 2 rows (a per-rollout shop environment, the embedded model
                 as the frozen customer simulator too)
  pycheck        data/math.jsonl, 2 rows (the tutorial's graph: one constrained python check per
                 rollout, so the tool node runs even on the 135M model)
  solvers        data/math.jsonl, 1 row (graphs/examples/solvers.yaml: a solver sub-graph per style,
                 two at once, then a parallel fork of a critic and a guess, then a pick)
  hello          data/math.jsonl, 3 rows x 2 samples
Rows and samples are few and new tokens capped (default 64) so that the whole job takes minutes on
two CPU cores with SmolLM2 (~25 tokens/s decoding, ~100 tokens/s prompt reading).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compilers.checks import check_file
from ..compilers.lower import lower
from ..compilers.targets import find_target
from ..data.synth import memagent_rows, write_jsonl
from ..errors import EXIT_INVALID, EXIT_OK, MissingDependency, UsageProblem
from ..spec.diagnostics import has_errors
from ..tools.retrieval_server import retrieval_service
from .branches import branch_report, routing_transitions
from .report import report
from .run import run_plan


@dataclass(frozen=True)
class DemoRun:
    graph: str
    data: str  # a file under the data directory, or "synth:memagent"
    limit: int
    n_samples: int
    service: str | None = None  # "retrieval": serve data/corpus.jsonl and pass metadata.retrieval_url


DEMO_RUNS = (  # the longest first, so that two at a time finish together
    DemoRun("agentflow", "math.jsonl", limit=1, n_samples=1),
    DemoRun("memagent", "synth:memagent", limit=1, n_samples=1),
    DemoRun("toolorchestra", "toolorchestra.jsonl", limit=2, n_samples=2, service="retrieval"),
    DemoRun("search_r1", "search_r1.jsonl", limit=2, n_samples=1, service="retrieval"),
    DemoRun("retool", "retool.jsonl", limit=2, n_samples=1),
    DemoRun("multi_agent", "multi_agent.jsonl", limit=1, n_samples=1),
    DemoRun("tau_retail", "tau_retail.jsonl", limit=2, n_samples=1),
    DemoRun("pycheck", "math.jsonl", limit=2, n_samples=1),
    DemoRun("solvers", "math.jsonl", limit=1, n_samples=1),
    DemoRun("hello", "math.jsonl", limit=3, n_samples=2),
)


def compile_all(
    graphs_dir: Path, out_dir: Path, echo: Callable[[str], None], echo_err: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], list]:
    """Check every graph; compile the valid ones to OUT/<name>/. Returns (plans by name, diagnostics).

    Each file's check report (diagnostics, then its status line) is printed before its compile line,
    through the same `echo` unless `echo_err` is given, so the lines keep their order in a log."""
    files = sorted(graphs_dir.glob("*.yaml")) + sorted(graphs_dir.glob("examples/*.yaml"))
    if not files:
        raise UsageProblem(f"no graphs found in {graphs_dir}")
    results, plans = [], {}
    for f in files:
        g, diags = check_file(f)
        results.append((str(f), diags))
        report([(str(f), diags)], False, out=echo, err=echo_err or echo)
        if g is None or has_errors(diags):
            continue
        plan = plans[f.stem] = lower(g)
        target = out_dir / f.stem
        find_target("slime").emit(plan, target)
        kinds: dict[str, int] = {}
        for n in plan.nodes.values():
            kinds[n.kind] = kinds.get(n.kind, 0) + 1
        echo(
            f"{f}: {len(plan.nodes)} nodes ({', '.join(f'{v} {k}' for k, v in kinds.items())}), "
            f"trained: {', '.join(_trained(plan)) or '-'}, "
            f"fan-out: {'yes' if plan.training.fanout else 'no'} -> {target}/"
        )
    return plans, results


def _trained(plan: Any, prefix: str = "") -> list[str]:
    """The trained nodes, a sub-graph's under its qualified names (`solve/draft`)."""
    out = [prefix + n for n in plan.training.trained_nodes]
    for nid, child in (plan.subgraphs or {}).items():
        out += _trained(child, f"{prefix}{nid}/")
    return out


@contextlib.contextmanager
def _service(run: DemoRun, data_dir: Path):
    if run.service != "retrieval":
        yield {}
        return

    with retrieval_service(data_dir / "corpus.jsonl") as url:
        yield {"retrieval_url": url}


def _data(run: DemoRun, data_dir: Path, out_dir: Path) -> Path:
    if run.data == "synth:memagent":
        path = out_dir / run.graph / "data.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(memagent_rows(max(run.limit, 1), seed=0), str(path))
        return path
    return data_dir / run.data


def run_demo(
    *,
    graphs_dir: str,
    data_dir: str,
    out_dir: str,
    model: str,
    max_tokens_cap: int,
    only: tuple[str, ...] = (),
    run: bool = True,
    jobs: int | None = None,
    echo: Callable[[str], None] = print,
    echo_err: Callable[[str], None] | None = None,
) -> int:
    """The whole job; returns the exit code (0, or 3 when a graph has errors).

    The runs go `jobs` at a time, each in its own thread with its own event loop and embedded model
    (the local engine computes on one CPU thread, so two runs use two cores); each run's report is
    printed whole when it finishes."""
    out, data = Path(out_dir), Path(data_dir)
    plans, results = compile_all(Path(graphs_dir), out, echo, echo_err)
    code = EXIT_INVALID if any(has_errors(d) for _, d in results) else EXIT_OK
    if code != EXIT_OK or not run:
        return code
    runs = [r for r in DEMO_RUNS if (not only or r.graph in only) and r.graph in plans]
    if any(r.service == "retrieval" for r in runs):
        _require_bm25()
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    lock = threading.Lock()
    t_all = time.monotonic()

    def one(r: DemoRun) -> tuple[str, float, Any]:
        t0 = time.monotonic()
        report, summary = _run_one(r, plans[r.graph], data, out, model, max_tokens_cap)
        seconds = time.monotonic() - t0
        with lock:
            echo(report + f"\n({r.graph}: {seconds:.1f} s)")
        return r.graph, seconds, summary

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="graphrl-demo") as pool:
        timings = list(pool.map(one, runs))
    echo(f"\n== demo time ({jobs} run(s) at a time) ==")
    for name, seconds, summary in timings:
        counts = f"{getattr(summary, 'rollouts', '?')} rollouts, {getattr(summary, 'samples', '?')} training samples"
        echo(f"{name:<15} {seconds:7.1f} s  {counts}")
    echo(f"{'total':<15} {time.monotonic() - t_all:7.1f} s")
    return EXIT_OK


def _run_one(r: DemoRun, plan: Any, data: Path, out: Path, model: str, max_tokens_cap: int) -> tuple[str, Any]:
    path = _data(r, data, out)
    traj = out / r.graph / "trajectories.jsonl"
    traj.unlink(missing_ok=True)
    with _service(r, data) as metadata:
        where = f" (retrieval service {metadata['retrieval_url']})" if metadata else ""
        header = (
            f"\n== graphrl run {r.graph}: {r.limit} row(s) of {path} x {r.n_samples} sample(s), "
            f"engine local, model {model}, max new tokens {max_tokens_cap}{where} =="
        )
        summary = run_plan(
            plan,
            path,
            traj,
            model=model,
            n_samples=r.n_samples,
            limit=r.limit,
            concurrency=4,
            seed=0,
            max_tokens_cap=max_tokens_cap,
            metadata=metadata,
            progress=False,
        )
    transitions = routing_transitions(plan, getattr(summary, "routes", {}))
    branches = branch_report(plan, transitions, getattr(summary, "visits", {}))
    return f"{header}\n{summary.table()}\n{branches}\ntrajectories: {traj}", summary


def _require_bm25() -> None:
    try:
        import bm25s  # noqa: F401
    except ImportError:
        raise MissingDependency("bm25s", "the BM25 retrieval service ToolOrchestra's demo run uses") from None
