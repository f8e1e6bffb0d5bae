"""The scale curve: client CPU per LLM call and peak RSS of one rollout process from 1 to 2,048
concurrent rollouts, for every bundled graph: `python -m benchmarks.scale [--quick] [--json FILE]`.

For each graph in graphs/ (compiled with `graphrl compile`, unchanged) and each concurrency c
(default 1 8 64 256 1024 2048): max(c, 8) rollouts (one sample each; c of them in flight at once, as
slime's semaphore keeps them), graphrl's compiled generate in a fresh process (benchmarks.client)
against the simulated SGLang server (benchmarks.sim: every non-policy model the graph declares is
routed to its "expert" endpoint; its /retrieve stub serves ToolOrchestra, `graphrl serve-retrieval`
serves Search-R1). Rows: the benchmark's own for memagent, toolorchestra, search_r1 and retool
(benchmarks.data), the repository's data/*.jsonl cycled for the others (hello and agentflow:
data/math.jsonl). The simulated model writes ToolOrchestra-style turns for prompts it does not
know (hello, agentflow, multi_agent, tau_retail), so those graphs run their fallback branches:
their rows measure the executor's cost per call and per rollout, not each branch.

Per cell: LLM calls, calls/s, client CPU ms per call, client CPU use (client CPU s / wall s, all
threads), the event loop's thread's share of the wall time on a CPU and runnable but waiting for one
(/proc/self/schedstat: on a shared machine the second is time other processes took), the simulated
server's CPU use, peak RSS
(VmHWM of the client process, the whole process: interpreter, tokenizer, graphrl, the rollouts in
flight). Then per graph the largest concurrency the process sustains (`sustained`), the peak
throughput and the server's CPU there (on a small machine the simulated server, sharing the cores,
can saturate before the client does), and the LLM calls per second one core serves at the client's
CPU per call: see docs/performance.md, "Scale curve".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from . import data, graphs
from .peers import Retrieval
from .run import REPO, Server, _note, run_cell

LEVELS = (1, 8, 64, 256, 1024, 2048)
QUICK_LEVELS = (1, 8)
SATURATED = 0.9  # share of the wall time the event loop is runnable (on a CPU or waiting for one)
LATENCY = (0.02, 0.001, 0.00001)
QUICK_LATENCY = (0.004, 0.0002, 0.000002)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="concurrency 1 and 8, every graph, cells in one process")
    p.add_argument(
        "--graphs", nargs="+", help="bundled graph names (default: every graphs/*.yaml, and examples/solvers)"
    )
    p.add_argument("--concurrency", type=int, nargs="+")
    p.add_argument("--min-rollouts", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--json", type=Path)
    p.add_argument("--report", type=Path, help="print the tables of a saved --json run (nothing is run)")
    p.add_argument("--build-dir", type=Path, default=REPO / "build" / "bench")
    return p


# graphs/examples/ holds one runnable graph (solvers.yaml; solver.yaml is its child, run through it)
EXAMPLES = ("examples/solvers",)


def bundled() -> list[str]:
    return sorted(p.stem for p in graphs.BUNDLED.glob("*.yaml")) + list(EXAMPLES)


def _rows(name: str, n: int, seed: int, tokenizer: Any) -> list[dict[str, Any]]:
    if name == "memagent":
        return data.memagent_rows(n, seed=seed, chunk_tokens=5000, chunks=(1, 3), tokenizer=tokenizer)
    if name == "toolorchestra":
        return data.toolorchestra_rows(n, seed=seed)
    if name == "search_r1":
        return data.search_r1_rows(n, seed=seed)
    if name == "retool":
        return data.retool_rows(n, seed=seed)
    own = REPO / "data" / f"{name}.jsonl"
    source = data.read_jsonl(own if own.exists() else REPO / "data" / "math.jsonl")
    return [dict(r, metadata=dict(r.get("metadata") or {})) for r in itertools.islice(itertools.cycle(source), n)]


def _plan_facts(module: Path) -> dict[str, Any]:
    """What slime's command line gives a compiled graph: a router for every non-policy model it
    declares, and `--reward-key` (the plan's reward.key: math_equal's and composite rewards' default
    to `score` in the plan; `score` for a plan compiled before that default)."""
    plan = json.loads(module.with_name("plan.json").read_text())
    key = (plan.get("reward") or {}).get("key") or "score"
    return {"models": [m for m in plan["models"] if m != "policy"], "reward_key": key}


def _server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy(r: dict[str, Any]) -> float:
    """How close the client is to saturation: the share of the wall time its event loop's thread was
    runnable (on a CPU or waiting for one), or the whole process's CPU use in cores when that is
    higher (tokenizer threads compete with the loop for the same cores); old results without
    schedstat: the client's CPU use."""
    if "loop_cpu_use" in r:
        return max(r["loop_cpu_use"] + r["loop_wait"], r["client_cpu_use"])
    return r["client_cpu_use"]


def sustained(rows: list[dict[str, Any]]) -> tuple[int, str]:
    """The largest concurrency this graph's rollout process sustains: the highest level up to which
    `busy` stays below SATURATED (its event loop still waits on I/O, so it is not what holds the
    rollouts back); and why not higher."""
    best, why = 0, "not saturated at the largest level measured"
    for r in sorted(rows, key=lambda r: r["concurrency"]):
        if busy(r) >= SATURATED:
            why = f"client busy {busy(r):.2f} at c={r['concurrency']}"
            break
        best = r["concurrency"]
    return best, why


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| graph | conc | rollouts | LLM calls | wall s | calls/s | CPU ms/call | client CPU use (cores) | "
        "event loop on CPU / waiting for one | server CPU use (cores) | peak RSS MB | p99 rollout s | statuses |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(rows, key=lambda r: (r["workflow"], r["concurrency"])):
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
        lines.append(
            f"| {r['workflow']} | {r['concurrency']} | {r['rollouts']} | {r['calls']} | {r['wall_s']:.2f} | "
            f"{r['calls_per_s']:.0f} | {r['cpu_ms_per_call']:.2f} | {r['client_cpu_use']:.2f} | "
            f"{r.get('loop_cpu_use', float('nan')):.2f} / {r.get('loop_wait', float('nan')):.2f} | "
            f"{r['server_cpu_use']:.2f} | {r['rss_peak_mb']:.0f} | {r['latency_p99_s']:.2f} | {statuses} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    head = (
        "| graph | sustained concurrency | why not higher | peak calls/s (at c; server CPU there) | "
        "CPU ms/call at 1 / at sustained | calls/s one core serves at sustained | peak RSS MB at sustained / at max |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for wf in sorted({r["workflow"] for r in rows}):
        mine = sorted((r for r in rows if r["workflow"] == wf), key=lambda r: r["concurrency"])
        best, why = sustained(mine)
        at = {r["concurrency"]: r for r in mine}
        b = at.get(best, mine[0])
        peak = max(mine, key=lambda r: r["calls_per_s"])
        lines.append(
            f"| {wf} | {best or '-'} | {why} | {peak['calls_per_s']:.0f} (c={peak['concurrency']}; "
            f"{peak['server_cpu_use']:.2f} cores) | {mine[0]['cpu_ms_per_call']:.2f} / {b['cpu_ms_per_call']:.2f} | "
            f"{1e3 / b['cpu_ms_per_call']:.0f} | {b['rss_peak_mb']:.0f} / {mine[-1]['rss_peak_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    if ns.report:
        saved = json.loads(ns.report.read_text())["cells"]
        print(table(saved) + "\n\n" + summary(saved))
        return 0
    lat = QUICK_LATENCY if ns.quick else LATENCY
    ns.per_request_s, ns.per_output_token_s, ns.per_prefill_token_s = lat
    ns.noncanonical_rate, ns.code_rate = 0.05, 0.35
    isolate = (not ns.quick) if ns.isolate is None else ns.isolate
    levels = tuple(ns.concurrency or (QUICK_LEVELS if ns.quick else LEVELS))
    names = ns.graphs or bundled()
    build = ns.build_dir
    t_start, load = time.time(), os.getloadavg()
    from graphrl.models.tokenizer import qwen_tokenizer, qwen_tokenizer_dir

    n_max = max(max(levels), ns.min_rollouts)
    modules, files = {}, {}
    for name in names:
        modules[name] = graphs.compile_graph(graphs.BUNDLED / f"{name}.yaml", build / "scale" / name)
        files[name] = data.write_jsonl(
            _rows(name, n_max, ns.seed, qwen_tokenizer()), build / "data" / f"scale-{name}-{ns.seed}-{n_max}.jsonl"
        )
    corpus = None
    if "search_r1" in names:
        corpus = data.write_jsonl(
            data.search_corpus(data.read_jsonl(files["search_r1"]), seed=ns.seed),
            build / "data" / f"scale-corpus-{ns.seed}-{n_max}.jsonl",
        )
    _note(f"{len(names)} graphs compiled, rows written ({time.time() - t_start:.1f} s)")
    server = Server(ns)
    retrieval = Retrieval(corpus) if corpus else None
    rows: list[dict[str, Any]] = []
    try:
        urls = {**server.urls, "search": retrieval.url if retrieval else ""}
        for name in names:
            all_rows = data.read_jsonl(files[name])
            for c in levels:
                n = max(c, ns.min_rollouts)
                cut = data.write_jsonl(all_rows[:n], build / "data" / f"scale-{name}-{ns.seed}-n{n}.jsonl")
                spec = {
                    "n_samples": 1,
                    "hf_checkpoint": str(qwen_tokenizer_dir()),
                    "warmup": 2,
                    "urls": urls,
                    "workflow": name,
                    "system": "graphrl",
                    "concurrency": c,
                    "data": str(cut),
                    "module": str(modules[name]),
                    **_plan_facts(modules[name]),
                }
                s0 = _server_cpu(server.proc.pid)
                r = run_cell(spec, isolate)
                # the server's CPU over the whole cell (set-up and warm-up included): an upper bound
                r["server_cpu_use"] = (_server_cpu(server.proc.pid) - s0) / max(r["cell_s"], 1e-9)
                r["client_cpu_use"] = r["cpu_s"] / r["wall_s"]
                r["calls_per_s"] = r["calls"] / r["wall_s"]
                rows.append(r)
                _note(
                    f"{name:<13} c={c:<5} {r['calls']:>6} calls {r['wall_s']:7.2f} s {r['cpu_ms_per_call']:6.2f} ms CPU/call "
                    f"client {r['client_cpu_use']:.2f} cores, RSS {r['rss_peak_mb']:.0f} MB"
                )
    finally:
        server.stop()
        if retrieval:
            retrieval.stop()
    out = [
        f"graphrl scale curve -- {'quick' if ns.quick else 'full'} run, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at end {os.getloadavg()[0]:.2f}; {time.time() - t_start:.0f} s",
        "",
        f"simulated model: {lat[0]:g} s per request + {lat[1]:g} s per output token + {lat[2]:g} s per uncached "
        f"prompt token; max(c, {ns.min_rollouts}) rollouts per cell, 1 sample per prompt; "
        f"{'each cell in its own process' if isolate else 'cells in one process'}",
        "",
        table(rows),
        "",
        f"Sustained: the event loop runnable, and the process's CPU use, below {SATURATED:g} (docs/performance.md, 'Scale curve'):",
        "",
        summary(rows),
    ]
    print("\n".join(out))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps({"argv": argv if argv is not None else sys.argv[1:], "cells": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
