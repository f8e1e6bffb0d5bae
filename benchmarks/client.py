"""One measured cell: (workflow, system, concurrency) -> a result dict. `python -m benchmarks.client SPEC.json`
runs one in a fresh process (what the full benchmark does) and prints the result as JSON.

Input: a cell spec (dict): workflow, system ("graphrl" | "careful" | "text"), concurrency, data file,
n_samples per prompt, server URLs, the tokenizer directory, the compiled module (graphrl), warm-up.
Output: wall time, rollouts/s, rollout latency p50/p99, client CPU (process CPU time of the timed
section, all threads) per LLM call, of which tokenisation (TimedTokenizer), prompt/cached tokens
(from the server's log), the audit (mismatches), peak RSS, mean reward, statuses, digests.

Driving is slime's: every sample is a task holding one semaphore slot for its whole generate call;
`sampling_params` is a per-sample copy of slime's defaults; the Sample is `benchmarks.sample`.
Warm-up rollouts (other sessions) run first, untimed; then the server is reset (logs, prefix cache).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

import aiohttp
import yaml

from .audit import audit_samples, request_stats
from .data import read_jsonl
from .sample import Sample, as_list, samples_for
from .sim.text import EXPERT_MODELS
from .tokclock import install

SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "max_new_tokens": 1024,
    "stop": None,
    "stop_token_ids": None,
    "skip_special_tokens": False,
    "no_stop_trim": True,
    "spaces_between_special_tokens": False,
}
BASELINES = {
    ("memagent", "careful"): "memagent_careful",
    ("memagent", "text"): "memagent_text",
    ("toolorchestra", "careful"): "toolorchestra_careful",
    ("toolorchestra", "text"): "toolorchestra_text",
}


def _host_port(url: str) -> tuple[str, int]:
    u = urlparse(url)
    return u.hostname or "127.0.0.1", int(u.port or 80)


def make_args(spec: dict[str, Any]) -> SimpleNamespace:
    ip, port = _host_port(spec["urls"]["policy"])
    expert = _host_port(spec["urls"]["expert"])
    args = SimpleNamespace(
        sglang_router_ip=ip,
        sglang_router_port=port,
        sglang_model_routers={m: expert for m in EXPERT_MODELS},
        hf_checkpoint=spec["hf_checkpoint"],
        rollout_max_response_len=1024,
        rollout_max_context_len=None,
        partial_rollout=False,
        apply_chat_template=False,
        reward_key=None,
        n_samples_per_prompt=spec["n_samples"],
        rollout_batch_size=spec["concurrency"],
        retrieval_url=spec["urls"]["retrieve"],
        memagent_chunk_tokens=spec.get("chunk_tokens", 5000),
    )
    if spec["system"] == "graphrl":  # slime's --custom-config-path: every key becomes an attribute
        config = Path(spec["module"]).with_name("slime_args.yaml")
        for k, v in (yaml.safe_load(config.read_text()) or {}).items():
            setattr(args, k, v)
    return args


def load_generate(spec: dict[str, Any]):
    if spec["system"] == "graphrl":
        path = Path(spec["module"])
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        mod_spec.loader.exec_module(module)
        return module.generate
    return importlib.import_module(f"benchmarks.baselines.{BASELINES[(spec['workflow'], spec['system'])]}").generate


async def _bench(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.request("POST" if url.endswith("reset") else "GET", url) as r:
        r.raise_for_status()
        return json.loads(await r.read())


async def _drive(generate, args, samples: list[Sample], concurrency: int) -> tuple[list[Any], list[float]]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(sample: Sample) -> Any:
        async with sem:
            t0 = time.perf_counter()
            out = await generate(args, sample, dict(SAMPLING))
            latencies.append(time.perf_counter() - t0)
            return out

    return await asyncio.gather(*(one(s) for s in samples)), latencies


def _rss() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024.0
    return out


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


async def _run(spec: dict[str, Any]) -> dict[str, Any]:
    timed = install(spec["hf_checkpoint"], graphrl=spec["system"] == "graphrl")
    generate = load_generate(spec)
    args = make_args(spec)
    rows = read_jsonl(Path(spec["data"]))
    if spec["workflow"] == "toolorchestra":  # the graph's input for the retrieval service
        for row in rows:
            row["metadata"]["retrieval_url"] = spec["urls"]["retrieve"]
    samples = samples_for(rows, spec["n_samples"])
    urls = spec["urls"]
    async with aiohttp.ClientSession() as http:
        if spec.get("warmup"):
            warm = samples_for(rows[: spec["warmup"]], 1)
            for w in warm:
                w.session_id, w.index = f"warm-{w.index}", 10**6 + w.index
            await _drive(generate, args, warm, len(warm))
        for role in ("policy", "expert"):
            await _bench(http, urls[role] + "/bench/reset")
        gc.collect()
        _reset_peak()
        rss0 = _rss()["VmRSS"]
        enc0, dec0 = timed.clock.encode_s, timed.clock.decode_s
        cpu0, t0 = time.process_time(), time.perf_counter()
        results, latencies = await _drive(generate, args, samples, spec["concurrency"])
        wall, cpu, enc = time.perf_counter() - t0, time.process_time() - cpu0, timed.clock.encode_s - enc0
        dec = timed.clock.decode_s - dec0
        mem = _rss()
        logs = {role: (await _bench(http, urls[role] + "/bench/log"))["log"] for role in ("policy", "expert")}
    await _close(spec["system"], generate)
    rollouts = {s.session_id: as_list(r) for s, r in zip(samples, results)}
    flat = [x for r in rollouts.values() for x in r]
    stats = request_stats(logs)
    calls = max(stats["calls"], 1)
    rewards = [sum(_reward(x) for x in r) for r in rollouts.values()]
    statuses: dict[str, int] = {}
    for x in flat:
        statuses[x.status.name.lower()] = statuses.get(x.status.name.lower(), 0) + 1
    lat = sorted(latencies)
    return {
        "workflow": spec["workflow"],
        "system": spec["system"],
        "concurrency": spec["concurrency"],
        "rollouts": len(samples),
        "samples": len(flat),
        "wall_s": wall,
        "rollouts_per_s": len(samples) / wall,
        "latency_p50_s": statistics.median(lat),
        "latency_p99_s": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "cpu_s": cpu,
        "cpu_ms_per_call": 1e3 * cpu / calls,
        "tokenise_ms_per_call": 1e3 * enc / calls,
        "decode_ms_per_call": 1e3 * dec / calls,
        "overhead_ms_per_call": 1e3 * (cpu - enc) / calls,
        "policy_calls": stats.get("policy", {}).get("calls", 0),
        "rss_peak_mb": mem["VmHWM"],
        "rss_growth_mb": mem["VmHWM"] - rss0,
        "mean_reward": statistics.fmean(rewards) if rewards else 0.0,
        "statuses": statuses,
        **{
            k: stats[k] for k in ("calls", "prompt_tokens", "cached_tokens", "hit_rate", "work_digest", "prompt_digest")
        },
        "policy_hit_rate": stats.get("policy", {}).get("hit_rate", 0.0),
        **audit_samples(rollouts, logs["policy"]),
        **spec.get("tags", {}),
        **({"logs": logs} if spec.get("keep_logs") else {}),
    }


async def _close(system: str, generate: Any) -> None:
    """Close the HTTP sessions of this event loop (graphrl's engines through the compiled module's
    target: a benchmark-only reach into its internals)."""
    if system != "graphrl":
        from .baselines import common

        await common.close()
        return
    target = getattr(sys.modules.get(generate.__module__), "_target", None)
    if target is not None:
        await target.close()


def _reward(sample: Any) -> float:
    r = sample.reward
    return float(r.get("score", 0.0)) if isinstance(r, dict) else float(r or 0.0)


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = asyncio.run(_run(spec))
    out["cell_s"] = time.perf_counter() - t0  # the whole cell: set-up, warm-up, run, audit
    return out


if __name__ == "__main__":
    print(json.dumps(run_cell(json.loads(Path(sys.argv[1]).read_text()))))
