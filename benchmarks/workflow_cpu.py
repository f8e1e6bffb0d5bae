"""The workflow code's CPU per LLM call, with the transport taken out: `python -m benchmarks.workflow_cpu`.

The main benchmark (`benchmarks.run`) measures whole clients against a simulated server over HTTP:
the real thing, but on this VM its cells move +-20% from run to run, more than the 0.1 ms per LLM
call that separates graphrl from the careful loop. This runs both in one process, in turn, on the
same samples, with the HTTP exchange replaced by canned replies at the same point for each --
graphrl's `SGLangEngine._post_generate` (the request is still encoded to JSON bytes, the reply
parsed and validated as from a server) and the careful loop's `common.post` (orjson both ways) -- so
what differs is the code between the sample and the engine: graphs, templates, threads, ledgers,
samples. Repeats alternate the two systems; the table gives medians.

Input: --rollouts, --concurrency, --repeats, --cold MB (each call starts with cold CPU caches: MB
megabytes copied through memory before each reply, that copy's CPU not counted). Output: a table
(CPU per LLM call, of which tokenisation, and garbage collection) and graphrl - careful in ms per
call, with the issue's 0.1 ms target; every run checks that both systems trained the same tokens
with the same masks, session by session.

The canned exchange (a benchmark double, not a server): ToolOrchestra's orchestrator calls
enhance_reasoning, call_expert, enhance_reasoning, then answer (no retrieval: the retrieval tool's
HTTP would be the one transport left); experts reply with a fixed text; the judge says correct.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from typing import Any

import orjson

from . import data, graphs
from .run import REPO

POLICY_PORT, EXPERT_PORT = 39001, 39002
ORCHESTRATOR_TURNS = [
    '<tool_call>\n{"name": "enhance_reasoning", "arguments": {"model": "expert-1"}}\n</tool_call>',
    '<tool_call>\n{"name": "call_expert", "arguments": {"model": "expert-2"}}\n</tool_call>',
    '<tool_call>\n{"name": "enhance_reasoning", "arguments": {"model": "expert-3"}}\n</tool_call>',
    '<tool_call>\n{"name": "answer", "arguments": {"model": "expert-1"}}\n</tool_call>',
]
EXPERT_TEXT = (
    "<think>\nThe records name the village twice; the later entry is the reliable one.\n</think>\n"
    "The bridge wardens' ledger for 1738 lists the lock's builders. <answer>Harrowby</answer>"
)
JUDGE_TEXT = '{"correct": true}'
IM_END = 151645


def _reply(tokenizer: Any, text: str) -> bytes:
    """An SGLang `/generate` response body for `text` (its ids then <|im_end|>)."""
    ids = [*tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids, IM_END]
    return orjson.dumps(
        {
            "text": text + "<|im_end|>",
            "output_ids": ids,
            "meta_info": {
                "id": "canned",
                "finish_reason": {"type": "stop", "matched": IM_END},
                "prompt_tokens": 1000,
                "completion_tokens": len(ids),
                "cached_tokens": 0,
                "output_token_logprobs": [[-0.125, i, None] for i in ids],
            },
        }
    )


class CannedExchange:
    """Replies by endpoint and, for the policy, by the session's turn (benchmark double). `cold_mb`:
    before each reply, copy that many MB through memory (what a server's work between two calls does
    to the client's CPU caches); the copy's own CPU time is kept in `evict_s`, for the caller to
    subtract."""

    def __init__(self, tokenizer: Any, cold_mb: int = 0):
        self.policy = [_reply(tokenizer, t) for t in ORCHESTRATOR_TURNS]
        self.expert = _reply(tokenizer, EXPERT_TEXT)
        self.judge = _reply(tokenizer, JUDGE_TEXT)
        self.turns: dict[str, int] = {}
        self.calls = 0
        self._source = bytes(cold_mb << 20)
        self._target = bytearray(cold_mb << 20)
        self.evict_s = 0.0

    def reply(self, port: int, session_id: str | None, judge: bool) -> bytes:
        self.calls += 1
        if self._source:
            t0 = time.process_time()
            self._target[:] = self._source  # a memcpy that pushes the workflow's objects out of the caches
            self.evict_s += time.process_time() - t0
        if port == POLICY_PORT:
            k = self.turns.get(session_id or "", 0)
            self.turns[session_id or ""] = k + 1
            return self.policy[min(k, len(self.policy) - 1)]
        return self.judge if judge else self.expert


def _install(exchange: CannedExchange) -> None:
    """Replace the HTTP exchange of graphrl's SGLang client and of the careful loop's helper."""
    from graphrl.engines import sglang
    from graphrl.engines._json import dumps

    from .baselines import common
    from .client import _host_port

    async def post_generate(self: Any, body_obj: dict, rid: str, session_id: str | None) -> bytes:
        dumps(body_obj)  # what the real method sends
        judge = body_obj["sampling_params"].get("temperature") == 0.0
        return exchange.reply(_host_port(self.url)[1], session_id, judge)

    async def post(url: str, payload: dict, session_id: str | None = None) -> dict:
        orjson.dumps(payload)
        judge = payload["sampling_params"].get("temperature") == 0.0
        return orjson.loads(exchange.reply(_host_port(url)[1], session_id, judge))

    sglang.SGLangEngine._post_generate = post_generate  # type: ignore[method-assign]
    common.post = post


def _run(system: str, generate: Any, args: Any, rows: list[dict], concurrency: int, timed: Any, ex: CannedExchange):
    from . import client
    from .sample import as_list, samples_for

    samples = samples_for(rows, 4)
    ex.turns.clear()
    calls0, enc0, evict0 = ex.calls, timed.clock.encode_s, ex.evict_s
    gc.collect()
    cpu0 = time.process_time()
    with client.GcClock() as collector:
        results, _ = asyncio.run(client._drive(generate, args, samples, concurrency, dict(client.SAMPLING)))
    cpu = time.process_time() - cpu0 - (ex.evict_s - evict0)
    calls = ex.calls - calls0
    return {
        "system": system,
        "calls": calls,
        "cpu": 1e3 * cpu / calls,
        "tokenise": 1e3 * (timed.clock.encode_s - enc0) / calls,
        "gc": 1e3 * collector.seconds / calls,
        "samples": {s.session_id: (tuple(s.tokens), tuple(s.loss_mask)) for r in results for s in as_list(r)},
        "statuses": sorted({s.status.name.lower() for r in results for s in as_list(r)}),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.workflow_cpu", description=__doc__.splitlines()[0])
    p.add_argument("--rollouts", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--cold",
        type=int,
        default=0,
        metavar="MB",
        help="copy MB megabytes through memory before each canned reply (its CPU not counted): each call "
        "then starts with cold CPU caches, as after the client idled (default 0: off)",
    )
    ns = p.parse_args(argv)
    from graphrl.models.tokenizer import qwen_tokenizer_dir

    from . import client
    from .tokclock import install

    build = REPO / "build" / "bench-workflow-cpu"
    graph = graphs.toolorchestra_yaml(build / "graphs")
    module = graphs.compile_graph(graph, build / graph.stem)
    rows = data.toolorchestra_rows(max(1, ns.rollouts // 4), seed=0)
    timed = install(str(qwen_tokenizer_dir()), graphrl=True)
    exchange = CannedExchange(timed, cold_mb=ns.cold)
    _install(exchange)
    urls = {
        "policy": f"http://127.0.0.1:{POLICY_PORT}",
        "expert": f"http://127.0.0.1:{EXPERT_PORT}",
        "retrieve": "http://127.0.0.1:9/retrieve",
    }
    systems = {}
    for system in ("graphrl", "careful"):
        spec = {
            "workflow": "toolorchestra",
            "system": system,
            "concurrency": ns.concurrency,
            "module": str(module),
            "n_samples": 4,
            "urls": urls,
            "hf_checkpoint": str(qwen_tokenizer_dir()),
        }
        systems[system] = (client.load_generate(spec), client.make_args(spec))
    for system, (generate, args) in systems.items():  # warm-up: imports, compiled templates, tables
        _run(system, generate, args, rows[:2], 8, timed, exchange)
    runs: dict[str, list[dict]] = {s: [] for s in systems}
    for _ in range(ns.repeats):
        for system, (generate, args) in systems.items():
            runs[system].append(_run(system, generate, args, rows, ns.concurrency, timed, exchange))
    g, c = runs["graphrl"][-1], runs["careful"][-1]
    if g["samples"] != c["samples"] or g["calls"] != c["calls"]:
        diff = sorted(k for k in g["samples"] if g["samples"][k] != c["samples"].get(k))
        print(f"graphrl and the careful loop trained different tokens or made different calls: {diff[:5]}")
        return 1
    med = {s: {k: statistics.median(r[k] for r in rs) for k in ("cpu", "tokenise", "gc")} for s, rs in runs.items()}
    cold = f"; {ns.cold} MB copied before each, its CPU not counted" if ns.cold else ""
    print(
        f"ToolOrchestra, {ns.rollouts} rollouts x {ns.repeats} repeats, concurrency {ns.concurrency}, "
        f"{g['calls']} LLM calls per run, transport replaced (canned replies{cold}); medians, ms per LLM call\n"
    )
    print("| system | CPU | tokenise | CPU excl. tokenise | of it GC |")
    print("|---|---|---|---|---|")
    for s, m in med.items():
        print(f"| {s} | {m['cpu']:.3f} | {m['tokenise']:.3f} | {m['cpu'] - m['tokenise']:.3f} | {m['gc']:.3f} |")
    extra = (med["graphrl"]["cpu"] - med["graphrl"]["tokenise"]) - (med["careful"]["cpu"] - med["careful"]["tokenise"])
    ratio = (med["graphrl"]["cpu"] - med["graphrl"]["tokenise"]) / (med["careful"]["cpu"] - med["careful"]["tokenise"])
    verdict = "PASS" if extra <= 0.1 else "MISS"
    print(
        f"\ngraphrl - careful CPU excl. tokenise: {extra:+.3f} ms per LLM call ({ratio:.2f}x) "
        f"[target <= +0.1: {verdict}]; same tokens and masks in every sample: yes; "
        f"statuses {g['statuses']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
