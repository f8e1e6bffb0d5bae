"""The benchmark harness: `python -m benchmarks.run [--quick] [--json FILE]`.

1. starts the simulated server (benchmarks.sim.server) in its own process;
2. derives the benchmark graphs from graphs/memagent.yaml and graphs/toolorchestra.yaml and
   compiles them with `graphrl compile` (benchmarks.graphs);
3. writes the seeded datasets once (benchmarks.data);
4. runs every cell -- workflow x concurrency x system (graphrl's compiled generate, the careful
   and the text-based hand-written baselines), `--repeats` times, the system order rotating -- each
   in a fresh client process (`--no-isolate`: in this process), against the same server, data and
   seeds;
5. MemAgent scaling: documents of 1..512 small chunks, client CPU per chunk (own, faster server);
6. prints the tables and the target verdicts (benchmarks.report); `--json` saves everything.

--quick: concurrency 1 and 8, a few rollouts, scaling at 1 and 16 chunks, cells in-process: well
under a minute; its correctness (not its timings) is what tests/benchmarks/test_quick.py checks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import data, graphs, report

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = ("graphrl", "careful", "text")
SCALING_SPEEDUP = 10.0
NO_CODE = " (no code execution)"
FULL = {
    "concurrency": (1, 64, 512),
    # concurrency 1: 224 ToolOrchestra calls a cell (8 rollouts made 56, too few for a 0.2% verdict)
    "rollouts": {1: 32, 64: 256, 512: 1024},
    "repeats": 3,
    "scaling": (1, 8, 64, 512),
    "scaling_rollouts": 8,
    "memagent_chunks": (1, 3),
    "empty_every": 16,
    "latency": (0.02, 0.001, 0.00001),
}
# quick: a smoke run; the simulated model is 5x faster (its timings mean nothing, its checks do)
QUICK = {
    "concurrency": (1, 8),
    "rollouts": {1: 2, 8: 16},
    "repeats": 1,
    "scaling": (1, 4),
    "scaling_rollouts": 2,
    "memagent_chunks": (1, 2),
    "empty_every": 4,
    "latency": (0.004, 0.0002, 0.000002),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the under-a-minute smoke run")
    p.add_argument("--concurrency", type=int, nargs="+", help="concurrency levels (default 1 64 512)")
    p.add_argument(
        "--rollouts",
        type=int,
        help="rollouts per cell (default: 32 / 256 / 1024 at concurrency 1 / 64 / 512; with --quick "
        "2 / 16 at 1 / 8; 4 x c at other levels)",
    )
    p.add_argument("--repeats", type=int, help="runs of every cell; tables show medians (default 3)")
    p.add_argument("--workflows", nargs="+", default=["memagent", "toolorchestra"])
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS))
    p.add_argument("--scaling", type=int, nargs="*", help="chunks per document for the scaling runs")
    p.add_argument("--scaling-chunk-tokens", type=int, default=64)
    p.add_argument("--n-samples", type=int, default=4, help="samples per prompt (slime's n_samples_per_prompt)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-request-s", type=float, help="simulated time per request (default 0.02)")
    p.add_argument("--per-output-token-s", type=float, help="simulated time per output token (default 0.001)")
    p.add_argument("--per-prefill-token-s", type=float, help="per uncached prompt token (default 0.00001)")
    p.add_argument(
        "--noncanonical-rate",
        type=float,
        default=0.05,
        help="share of model turns with one non-canonically tokenised word",
    )
    p.add_argument(
        "--code-rate",
        type=float,
        default=0.35,
        help="share of enhance_reasoning expert turns with a ```python block (run by the python tool)",
    )
    p.add_argument(
        "--no-code-variant",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="full runs also run ToolOrchestra with --code-rate 0 (the orchestration alone, "
        "without the python tool's sandbox) for graphrl and careful",
    )
    p.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each cell in a fresh process (default: on, off with --quick)",
    )
    p.add_argument("--json", type=Path, help="write all results here")
    p.add_argument(
        "--stacks",
        type=Path,
        help="sample each cell's client CPU by stack into this directory and print where it went "
        "(`python -m benchmarks.stacks DIR` re-prints it); the sampler costs the client about 0.2%% of its CPU",
    )
    p.add_argument("--build-dir", type=Path, default=REPO / "build" / "bench")
    p.add_argument(
        "--report", type=Path, help="print the tables and target verdicts of a saved --json run (nothing is run)"
    )
    return p


class Server:
    """The simulated server process; `urls` once it listens."""

    def __init__(self, ns: argparse.Namespace):
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.sim.server",
            "--seed",
            str(ns.seed),
            "--per-request-s",
            str(ns.per_request_s),
            "--per-output-token-s",
            str(ns.per_output_token_s),
            "--per-prefill-token-s",
            str(ns.per_prefill_token_s),
            "--noncanonical-rate",
            str(ns.noncanonical_rate),
            "--code-rate",
            str(ns.code_rate),
        ]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError(f"the simulated server did not start: {self.proc.stderr.read()[-2000:]}")
        self.urls = json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_cell(spec: dict[str, Any], isolate: bool) -> dict[str, Any]:
    if not isolate:
        from .client import run_cell as inline

        return inline(spec)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.client", f.name], cwd=REPO, capture_output=True, text=True
        )
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(
            f"cell {spec['workflow']}/{spec['system']}/c={spec['concurrency']} failed:\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _note(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def _progress(r: dict[str, Any]) -> None:
    print(
        f"  {r['workflow']:<13} {r['system']:<8} c={r['concurrency']:<4} {r['rollouts']:>5} rollouts "
        f"{r['wall_s']:7.2f} s  {r['cpu_ms_per_call']:6.2f} ms CPU/call "
        f"({r['overhead_ms_per_call']:.2f} excl. tokenise)  mismatches {r['mismatch_tokens']}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    if ns.report is not None:
        return _report(ns.report)
    preset, repeats, isolate = _settings(ns)
    scaling = tuple(preset["scaling"] if ns.scaling is None else ns.scaling)
    build = ns.build_dir
    build.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    load = os.getloadavg()

    from graphrl.models.tokenizer import qwen_tokenizer_dir

    modules = {
        "memagent": graphs.compile_graph(graphs.memagent_yaml(build / "graphs"), build / "memagent"),
        "toolorchestra": graphs.compile_graph(graphs.toolorchestra_yaml(build / "graphs"), build / "toolorchestra"),
    }
    _note(f"graphs compiled ({time.time() - t_start:.1f} s)")
    base = {"n_samples": ns.n_samples, "hf_checkpoint": str(qwen_tokenizer_dir()), "warmup": 2}
    cells = _matrix(ns, preset, ns, ns.workflows, ns.systems, "", modules, base, repeats, isolate)
    if not ns.quick and ns.no_code_variant and "toolorchestra" in ns.workflows:
        no_code = argparse.Namespace(**{**vars(ns), "code_rate": 0.0})
        cells += _matrix(
            ns,
            preset,
            no_code,
            ["toolorchestra"],
            [x for x in ns.systems if x != "text"],
            NO_CODE,
            modules,
            base,
            repeats,
            isolate,
        )
    scale_rows = _scaling(ns, preset, scaling, base, build, isolate)

    head = (
        f"graphrl benchmarks -- {'quick' if ns.quick else 'full'} run, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at end {os.getloadavg()[0]:.2f}; "
        f"{time.time() - t_start:.0f} s"
    )
    print(_render(ns, preset, repeats, isolate, cells, scale_rows, head))
    if ns.stacks is not None:
        from . import stacks

        print(f"\n## Where the client CPU went (sampled stacks in {ns.stacks})\n")
        print(stacks.report(stacks.load(ns.stacks)))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(
            json.dumps(
                {
                    "argv": argv if argv is not None else sys.argv[1:],
                    "started": t_start,
                    "elapsed_s": time.time() - t_start,
                    "load_start": load,
                    "load_end": os.getloadavg(),
                    "cells": cells,
                    "scaling": scale_rows,
                },
                indent=1,
            )
        )
    return 0


def _settings(ns: argparse.Namespace) -> tuple[dict[str, Any], int, bool]:
    """The preset of the run (full or quick) with its defaults filled into `ns`; the repeats; whether
    each cell runs in its own process."""
    preset = QUICK if ns.quick else FULL
    for name, value in zip(("per_request_s", "per_output_token_s", "per_prefill_token_s"), preset["latency"]):
        if getattr(ns, name) is None:
            setattr(ns, name, value)
    isolate = (not ns.quick) if ns.isolate is None else ns.isolate
    return preset, ns.repeats or preset["repeats"], isolate


def _report(path: Path) -> int:
    """Re-print a saved run (`--json`) with the current tables and targets."""
    saved = json.loads(path.read_text())
    ns = parser().parse_args(saved["argv"])
    preset, repeats, isolate = _settings(ns)
    load, end = saved["load_start"], saved["load_end"]
    when = (
        f", started {time.strftime('%Y-%m-%d %H:%M', time.localtime(saved['started']))}" if "started" in saved else ""
    )
    took = f"; {saved['elapsed_s']:.0f} s" if "elapsed_s" in saved else ""
    head = (
        f"graphrl benchmarks -- {'quick' if ns.quick else 'full'} run saved in {path}{when} (argv "
        f"{' '.join(saved['argv']) or 'none'}), load average at start {load[0]:.2f} / {load[1]:.2f} / "
        f"{load[2]:.2f}, at end {end[0]:.2f}{took}"
    )
    print(_render(ns, preset, repeats, isolate, saved["cells"], saved["scaling"], head))
    return 0


def _render(
    ns: argparse.Namespace,
    preset: dict[str, Any],
    repeats: int,
    isolate: bool,
    cells: list[dict[str, Any]],
    scale_rows: list[dict[str, Any]],
    head: str,
) -> str:
    merged = report.merge(cells)
    out = [
        head,
        "",
        f"simulated model: {ns.per_request_s:g} s per request + {ns.per_output_token_s:g} s per output token + "
        f"{ns.per_prefill_token_s:g} s per uncached prompt token; {ns.noncanonical_rate:.0%} of turns with a "
        f"non-canonical token; {ns.code_rate:.0%} of reasoning turns run Python; {ns.n_samples} samples per prompt; "
        f"{'each cell in its own process' if isolate else 'cells in one process'}; medians of {repeats} run(s)",
        "",
    ]
    for wf in sorted({c["workflow"] for c in cells}, key=lambda w: (w.endswith(NO_CODE), w)):
        out += [
            f"## {wf}",
            "",
            report.cell_table(merged, wf),
            "",
            "graphrl / careful:",
            "",
            report.ratio_table(merged, wf),
            "",
        ]
    if scale_rows:
        out += [
            "## MemAgent scaling (chunk_tokens "
            f"{ns.scaling_chunk_tokens}, {preset['scaling_rollouts']} rollouts per size, concurrency "
            f"{preset['scaling_rollouts']}, a {SCALING_SPEEDUP:g}x faster simulated model)",
            "",
            report.scaling_table(scale_rows),
            "",
        ]
    out += ["## Targets", ""] + [f"- {v}" for v in report.verdicts(merged)]
    return "\n".join(out)


def _matrix(ns, preset, server_ns, workflows, systems, suffix, modules, base, repeats, isolate) -> list[dict[str, Any]]:
    """Every (workflow, concurrency, repeat, system) cell against one simulated server started with
    `server_ns`; results labelled workflow + `suffix`."""
    from graphrl.models.tokenizer import qwen_tokenizer

    build = ns.build_dir
    rollouts = lambda c: ns.rollouts or preset["rollouts"].get(c, 4 * c)
    cells: list[dict[str, Any]] = []
    server = Server(server_ns)
    _note(f"simulated server ready (code rate {server_ns.code_rate:g})")
    try:
        for wf in workflows:
            for c in ns.concurrency or preset["concurrency"]:
                prompts = max(1, rollouts(c) // ns.n_samples)
                path = (
                    build
                    / "data"
                    / (
                        f"{wf}-{ns.seed}-{prompts}-"
                        + "-".join(map(str, preset["memagent_chunks"]))
                        + f"-{preset['empty_every']}.jsonl"
                    )
                )
                if not path.exists():
                    rows = (
                        data.memagent_rows(
                            prompts,
                            seed=ns.seed,
                            chunk_tokens=5000,
                            chunks=preset["memagent_chunks"],
                            tokenizer=qwen_tokenizer(),
                            empty_every=preset["empty_every"],
                        )
                        if wf == "memagent"
                        else data.toolorchestra_rows(prompts, seed=ns.seed)
                    )
                    data.write_jsonl(rows, path)
                for rep in range(repeats):
                    order = systems[rep % len(systems) :] + systems[: rep % len(systems)]
                    for system in order:
                        spec = {
                            **base,
                            "urls": server.urls,
                            "workflow": wf,
                            "system": system,
                            "concurrency": c,
                            "data": str(path),
                            "module": str(modules[wf]),
                            "tags": {"repeat": rep},
                        }
                        if ns.stacks is not None:  # benchmarks.stacks: this cell's sampled stacks
                            name = f"{wf}{suffix}-c{c}-r{rep}-{system}.stacks.json"
                            spec.update(stacks=str(ns.stacks / name), code_rate=server_ns.code_rate)
                        cell = run_cell(spec, isolate)
                        cell["workflow"] += suffix
                        cells.append(cell)
                        _progress(cell)
    finally:
        server.stop()
    return cells


def _scaling(ns, preset, sizes, base, build, isolate) -> list[dict[str, Any]]:
    """MemAgent over documents of `sizes` chunks of `--scaling-chunk-tokens` tokens: client CPU per
    chunk. Against its own server, SCALING_SPEEDUP times faster (these runs measure CPU, not wall)."""
    if not sizes or "memagent" not in ns.workflows:
        return []
    from graphrl.models.tokenizer import qwen_tokenizer

    fast = argparse.Namespace(
        **{
            **vars(ns),
            **{
                k: getattr(ns, k) / SCALING_SPEEDUP
                for k in ("per_request_s", "per_output_token_s", "per_prefill_token_s")
            },
        }
    )
    k = ns.scaling_chunk_tokens
    module = graphs.compile_graph(graphs.memagent_yaml(build / "graphs", chunk_tokens=k), build / f"memagent_c{k}")
    rows_out = []
    n = preset["scaling_rollouts"]
    server = Server(fast)
    try:
        for size in sizes:
            path = build / "data" / f"scaling-{ns.seed}-{k}-{size}-{n}.jsonl"
            if not path.exists():
                data.write_jsonl(
                    data.memagent_rows(
                        n, seed=ns.seed, chunk_tokens=k, chunks=(size, size), tokenizer=qwen_tokenizer()
                    ),
                    path,
                )
            for system in [s for s in ns.systems if s in ("graphrl", "careful")]:
                spec = {
                    **base,
                    "urls": server.urls,
                    "n_samples": 1,
                    "workflow": "memagent",
                    "system": system,
                    "concurrency": n,
                    "data": str(path),
                    "module": str(module),
                    "chunk_tokens": k,
                    "warmup": 1,
                    "tags": {"chunks": size},
                }
                rows_out.append(run_cell(spec, isolate))
                _progress(rows_out[-1])
    finally:
        server.stop()
    return rows_out


if __name__ == "__main__":
    sys.exit(main())
