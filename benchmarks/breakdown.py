"""Where graphrl's client CPU goes, per LLM call: `python -m benchmarks.breakdown WORKFLOW [--concurrency N]`.

Runs one graphrl cell in this process with the CPU time (`time.thread_time`, no sampling profiler)
of a fixed list of graphrl's synchronous functions accumulated, and prints each as ms per LLM call
next to the cell's totals. Times are exclusive (a listed function called from another listed one
counts only for itself), async ones (HTTP, tools) are not listed: the rest is the transport, the
event loop and everything unlisted. Benchmark-only instrumentation: it wraps
graphrl's functions at run time and never changes them on disk.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from typing import Any

from . import data, graphs
from .run import REPO, Server

# (module, owner attribute or None, function, label)
_TIMED = (
    ("graphrl.runtime.chat_template", "TemplateRenderer", "render", "chat template render (thread + fresh prompts)"),
    ("graphrl.runtime.scope", "Renderer", "_run", "graph templates and conditions (Jinja)"),
    ("graphrl.runtime.chat", "ChatRenderer", "decode", "decode (chunks, outputs, responses)"),
    ("graphrl.runtime.chat", "ChatThread", "add_output", "thread add_output"),
    ("graphrl.runtime.chat", None, "_label_parts", "thread delta labelling"),
    ("graphrl.runtime.ledger", "SampleBuilder", "set_prompt", "ledger set_prompt"),
    ("graphrl.runtime.ledger", "SampleBuilder", "append", "ledger append"),
    ("graphrl.runtime.ledger", "SampleBuilder", "freeze", "ledger freeze"),
    ("graphrl.runtime.executor", "Executor", "_ctx", "executor context"),
    ("graphrl.runtime.executor", "Executor", "_messages", "executor prompt messages"),
    ("graphrl.runtime.executor", "Executor", "_params", "executor sampling params"),
    ("graphrl.runtime.executor", "Executor", "_finish_samples", "executor finish samples"),
    ("graphrl.runtime.executor", None, "parse_output", "output parsers"),
    ("graphrl.engines.sglang", None, "parse_generate_response", "SGLang response parsing"),
    ("graphrl.engines.sglang", None, "dumps", "SGLang request encoding"),
    ("graphrl.compilers.slime.adapter", "SlimeTarget", "_to_slime", "slime adapter: fill Samples"),
)


def instrument() -> dict[str, list[float]]:
    """Wrap the functions of `_TIMED`; returns label -> [exclusive CPU seconds, calls]. Exclusive:
    time spent in a listed function called from another listed one counts only for the inner one."""
    import importlib
    import threading

    acc: dict[str, list[float]] = {}
    local = threading.local()
    for module, owner, name, label in _TIMED:
        target = importlib.import_module(module)
        holder = getattr(target, owner) if owner else target
        fn = getattr(holder, name, None)
        if fn is None:
            continue

        def wrap(fn: Any, label: str = label) -> Any:
            @functools.wraps(fn)
            def timed(*a: Any, **k: Any) -> Any:
                stack = local.__dict__.setdefault("stack", [])
                stack.append(0.0)  # time of listed callees
                t = time.thread_time()
                try:
                    return fn(*a, **k)
                finally:
                    elapsed = time.thread_time() - t
                    inner = stack.pop()
                    if stack:
                        stack[-1] += elapsed
                    slot = acc.setdefault(label, [0.0, 0])
                    slot[0] += elapsed - inner
                    slot[1] += 1

            return timed

        setattr(holder, name, wrap(fn))
    return acc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.breakdown", description=__doc__.splitlines()[0])
    p.add_argument("workflow", choices=("memagent", "toolorchestra"))
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--rollouts", type=int, default=128)
    p.add_argument("--code-rate", type=float, default=0.35)
    ns = p.parse_args(argv)
    from graphrl.models.tokenizer import qwen_tokenizer, qwen_tokenizer_dir

    from . import client

    acc = instrument()
    build = REPO / "build" / "bench-breakdown"
    server = Server(
        argparse.Namespace(
            seed=0,
            per_request_s=0.02,
            per_output_token_s=0.001,
            per_prefill_token_s=1e-5,
            noncanonical_rate=0.05,
            code_rate=ns.code_rate,
        )
    )
    try:
        if ns.workflow == "memagent":
            graph = graphs.memagent_yaml(build / "graphs")
            rows = data.memagent_rows(
                max(1, ns.rollouts // 4), seed=0, chunk_tokens=5000, chunks=(1, 3), tokenizer=qwen_tokenizer()
            )
        else:
            graph = graphs.toolorchestra_yaml(build / "graphs")
            rows = data.toolorchestra_rows(max(1, ns.rollouts // 4), seed=0)
        module = graphs.compile_graph(graph, build / graph.stem)
        path = data.write_jsonl(rows, build / f"{ns.workflow}.jsonl")
        drive, runs = client._drive, []

        async def counted(*a: Any) -> Any:  # clear the accumulators after the warm-up
            runs.append(1)
            if len(runs) == 2:
                acc.clear()
            return await drive(*a)

        client._drive = counted
        spec = {
            "workflow": ns.workflow,
            "system": "graphrl",
            "concurrency": ns.concurrency,
            "data": str(path),
            "module": str(module),
            "n_samples": 4,
            "urls": server.urls,
            "warmup": 2,
            "hf_checkpoint": str(qwen_tokenizer_dir()),
        }
        r = client.run_cell(spec)
    finally:
        server.stop()
    calls = r["calls"]
    print(
        f"{ns.workflow}, graphrl, c={ns.concurrency}, {r['rollouts']} rollouts, {calls} LLM calls: "
        f"client CPU {r['cpu_ms_per_call']:.3f} ms/call = tokenise {r['tokenise_ms_per_call']:.3f} + "
        f"the rest {r['overhead_ms_per_call']:.3f}, of which:"
    )
    listed = 0.0
    for label, (s, n) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
        listed += s
        print(f"  {1e3 * s / calls:7.3f} ms/call  {label:<48} ({n} calls, {1e6 * s / max(n, 1):.0f} us each)")
    print(
        f"  {r['overhead_ms_per_call'] - 1e3 * listed / calls:7.3f} ms/call  everything else (transport, event loop, "
        "tools, unlisted code)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
