"""Profile one cell with pyinstrument: `python -m benchmarks.profile WORKFLOW SYSTEM [--concurrency N]`.

Starts the simulated server, compiles the graph, writes the dataset, runs the cell in this process
under `pyinstrument` (the `bench` extra: `pip install -e '.[bench]'`) and prints the call tree of
the client's CPU time (or writes HTML with --html). Timings under a profiler are not benchmark
numbers; use it to find where the client's time goes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import data, graphs
from .run import REPO, Server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    p.add_argument("workflow", choices=("memagent", "toolorchestra"))
    p.add_argument("system", choices=("graphrl", "careful", "text"))
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--rollouts", type=int, default=128)
    p.add_argument("--chunk-tokens", type=int, default=5000)
    p.add_argument("--chunks", type=int, nargs=2, default=(1, 2))
    p.add_argument("--html", type=Path)
    p.add_argument("--interval", type=float, default=0.0005)
    ns = p.parse_args(argv)
    server_ns = argparse.Namespace(
        seed=0,
        per_request_s=0.02,
        per_output_token_s=0.001,
        per_prefill_token_s=1e-5,
        noncanonical_rate=0.05,
        code_rate=0.35,
    )
    from pyinstrument import Profiler

    from graphrl.models.tokenizer import qwen_tokenizer, qwen_tokenizer_dir

    from .client import run_cell

    build = REPO / "build" / "bench-profile"
    server = Server(server_ns)
    try:
        tok = qwen_tokenizer()
        if ns.workflow == "memagent":
            k = None if ns.chunk_tokens == 5000 else ns.chunk_tokens
            graph = graphs.memagent_yaml(build / "graphs", chunk_tokens=k)
            rows = data.memagent_rows(
                max(1, ns.rollouts // 4), seed=0, chunk_tokens=ns.chunk_tokens, chunks=tuple(ns.chunks), tokenizer=tok
            )
        else:
            graph = graphs.toolorchestra_yaml(build / "graphs")
            rows = data.toolorchestra_rows(max(1, ns.rollouts // 4), seed=0)
        module = graphs.compile_graph(graph, build / graph.stem)
        path = data.write_jsonl(rows, build / f"{ns.workflow}.jsonl")
        spec = {
            "workflow": ns.workflow,
            "system": ns.system,
            "concurrency": ns.concurrency,
            "data": str(path),
            "module": str(module),
            "n_samples": 4,
            "urls": server.urls,
            "warmup": 2,
            "hf_checkpoint": str(qwen_tokenizer_dir()),
            "chunk_tokens": ns.chunk_tokens,
        }
        profiler = Profiler(interval=ns.interval, async_mode="disabled")
        profiler.start()
        result = run_cell(spec)
        profiler.stop()
    finally:
        server.stop()
    print({k: result[k] for k in ("wall_s", "cpu_ms_per_call", "overhead_ms_per_call", "calls")}, file=sys.stderr)
    if ns.html:
        ns.html.write_text(profiler.output_html())
    else:
        print(profiler.output_text(unicode=True, color=False, show_all=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
