"""graphrl's bundled Search-R1 and ReTool graphs against slime's own example code:
`python -m benchmarks.peers --slime DIR [--quick] [--json FILE]`.

The peers are slime's `examples/search-r1/generate_with_search.py` and
`examples/retool/generate_with_retool.py`, imported unmodified from the slime checkout given on the
command line (benchmarks.slime_examples; nothing of slime is in this project). Without `--slime`
(or with a path that is not a usable checkout) the slime rows are skipped and the run says why;
graphrl's rows still run.

Both systems run on the same rows (benchmarks.data: one row per rollout, `n_samples_per_prompt` 1),
against the same simulated SGLang server (benchmarks.sim; its Search-R1 / ReTool turns are a
function of the prompt, so both get the same scripted behaviour: benchmarks.sim.agents), at the
same concurrency levels, each cell in a fresh process, driven as slime drives a custom generate
function (a task per sample under a semaphore, then the reward function).
  search_r1  graphrl: graphs/search_r1.yaml compiled; slime: its example, its config dict set to the
             graph's limits (max_turns 4, topk 3) and its local search backend pointed at the same
             service: `graphrl serve-retrieval` (BM25) over a seeded corpus, in its own process.
  retool     graphrl: graphs/retool.yaml compiled, code in graphrl's sandbox (one interpreter per
             rollout); slime: its example with its own executor (examples/retool/tool_sandbox.py:
             a `python3` subprocess per code block).
Columns (benchmarks.report.peer_table): as benchmarks.run's, plus the calls whose prompt ids are
not the sample's own tokens up to that point (benchmarks.audit.context_mismatches).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import data, graphs, report, slime_examples
from .run import REPO, Server, _note, _progress, run_cell

WORKFLOWS = ("search_r1", "retool")
FULL = {"concurrency": (1, 64, 512), "rollouts": {1: 16, 64: 256, 512: 1024}, "repeats": 3}
QUICK = {"concurrency": (1, 8), "rollouts": {1: 4, 8: 16}, "repeats": 1}
LATENCY = {"full": (0.02, 0.001, 0.00001), "quick": (0.004, 0.0002, 0.000002)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    p.add_argument("--slime", type=Path, help="root of a THUDM/slime checkout (slime/ and examples/ inside)")
    p.add_argument("--quick", action="store_true", help="a smoke run: concurrency 1 and 8, a few rollouts")
    p.add_argument("--workflows", nargs="+", default=list(WORKFLOWS), choices=WORKFLOWS)
    p.add_argument("--concurrency", type=int, nargs="+")
    p.add_argument("--rollouts", type=int, help="rollouts per cell (default: 16 at c=1, 4 x c otherwise)")
    p.add_argument("--repeats", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noncanonical-rate", type=float, default=0.05)
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--json", type=Path)
    p.add_argument("--build-dir", type=Path, default=REPO / "build" / "bench")
    return p


class Retrieval:
    """`graphrl serve-retrieval --corpus FILE --port 0` in its own process; `url` once it listens."""

    def __init__(self, corpus: Path):
        cmd = [sys.executable, "-m", "graphrl", "serve-retrieval", "--corpus", str(corpus), "--port", "0"]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.proc.stdout], [], [], 120)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http"):
            self.stop()
            raise RuntimeError(f"the retrieval service did not start: {self.proc.stderr.read()[-2000:]}")
        self.url = line.rstrip("/") + "/retrieve"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _datasets(build: Path, seed: int, n: int) -> dict[str, dict[str, Path]]:
    """Per workflow: graphrl's rows, the same rows as slime's example reads them, (Search-R1) corpus."""
    out: dict[str, dict[str, Path]] = {}
    d = build / "data"
    sr1 = data.search_r1_rows(n, seed=seed)
    template = (REPO / "prompts" / "search_r1" / "question.j2").read_text(encoding="utf-8")
    out["search_r1"] = {
        "rows": data.write_jsonl(sr1, d / f"search_r1-{seed}-{n}.jsonl"),
        "peer": data.write_jsonl(data.search_r1_peer_rows(sr1, template), d / f"search_r1-slime-{seed}-{n}.jsonl"),
        "corpus": data.write_jsonl(data.search_corpus(sr1, seed=seed), d / f"search_r1-corpus-{seed}-{n}.jsonl"),
    }
    rt = data.retool_rows(n, seed=seed)
    out["retool"] = {
        "rows": data.write_jsonl(rt, d / f"retool-{seed}-{n}.jsonl"),
        "peer": data.write_jsonl(data.retool_peer_rows(rt), d / f"retool-slime-{seed}-{n}.jsonl"),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    preset = QUICK if ns.quick else FULL
    ns.per_request_s, ns.per_output_token_s, ns.per_prefill_token_s = LATENCY["quick" if ns.quick else "full"]
    ns.code_rate = 0.0  # ToolOrchestra's knob; these workflows' code turns are planned per rollout
    repeats = ns.repeats or preset["repeats"]
    isolate = (not ns.quick) if ns.isolate is None else ns.isolate
    concurrency = tuple(ns.concurrency or preset["concurrency"])
    rollouts = lambda c: ns.rollouts or preset["rollouts"].get(c, 4 * c)
    systems = ["graphrl"]
    skipped = ""
    try:
        slime_root = str(slime_examples.check(ns.slime))
        systems.append("slime")
    except slime_examples.SlimeUnavailable as exc:
        slime_root, skipped = None, f"slime's examples skipped: {exc}"
        _note(skipped)
    t_start, load = time.time(), os.getloadavg()
    build = ns.build_dir
    from graphrl.models.tokenizer import qwen_tokenizer_dir

    modules = {wf: graphs.compile_graph(graphs.BUNDLED / f"{wf}.yaml", build / wf) for wf in ns.workflows}
    files = _datasets(build, ns.seed, max(rollouts(c) for c in concurrency))
    base = {"n_samples": 1, "hf_checkpoint": str(qwen_tokenizer_dir()), "warmup": 2, "slime": slime_root}
    cells: list[dict[str, Any]] = []
    server = Server(ns)
    retrieval = Retrieval(files["search_r1"]["corpus"]) if "search_r1" in ns.workflows else None
    try:
        urls = {**server.urls, "search": retrieval.url if retrieval else ""}
        for wf in ns.workflows:
            for c in concurrency:
                n = rollouts(c)
                rows = data.read_jsonl(files[wf]["rows"])
                # the warm-up (untimed, before the server's reset) runs the first rows once more
                cut = {"rows": build / "data" / f"{wf}-{ns.seed}-c{c}.jsonl"}
                data.write_jsonl(rows[:n], cut["rows"])
                peer = build / "data" / f"{wf}-slime-{ns.seed}-c{c}.jsonl"
                data.write_jsonl(data.read_jsonl(files[wf]["peer"])[:n], peer)
                for rep in range(repeats):
                    for system in systems[rep % len(systems) :] + systems[: rep % len(systems)]:
                        spec = {
                            **base,
                            "urls": urls,
                            "workflow": wf,
                            "system": system,
                            "concurrency": c,
                            "data": str(cut["rows"]),
                            "peer_data": str(peer),
                            "module": str(modules[wf]),
                            "tags": {"repeat": rep},
                        }
                        cell = run_cell(spec, isolate)
                        cells.append(cell)
                        _progress(cell)
    finally:
        server.stop()
        if retrieval:
            retrieval.stop()
    merged = report.merge(cells)
    out = [
        f"graphrl vs slime's own examples -- {'quick' if ns.quick else 'full'} run, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}, at end {os.getloadavg()[0]:.2f}; {time.time() - t_start:.0f} s",
        "",
        f"slime: {slime_root or skipped}",
        f"simulated model: {ns.per_request_s:g} s per request + {ns.per_output_token_s:g} s per output token + "
        f"{ns.per_prefill_token_s:g} s per uncached prompt token; {ns.noncanonical_rate:.0%} of turns with a "
        f"non-canonical token; 1 sample per prompt; {'each cell in its own process' if isolate else 'cells in one process'}; "
        f"medians of {repeats} run(s)",
        "",
    ]
    for wf in ns.workflows:
        out += [f"## {wf}", "", report.peer_table(merged, wf), ""]
        if "slime" in systems:
            out += ["graphrl / slime:", "", report.peer_ratios(merged, wf), ""]
    print("\n".join(out))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps({"argv": argv if argv is not None else sys.argv[1:], "cells": cells}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
