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
import copy
import gc
import importlib
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

import aiohttp
import yaml

from .audit import audit_samples, context_mismatches, request_stats
from .data import read_jsonl
from .sample import as_list, samples_for
from .sim.text import EXPERT_MODELS
from .stacks import CpuSampler
from .stacks import write as write_stacks
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


PEER_WORKFLOWS = ("search_r1", "retool")  # benchmarks.peers: generate + reward per sample, like slime
MAX_NEW_TOKENS = {"search_r1": 512}  # slime's Search-R1 run script: --rollout-max-response-len 512


def make_args(spec: dict[str, Any]) -> SimpleNamespace:
    ip, port = _host_port(spec["urls"]["policy"])
    expert = _host_port(spec["urls"]["expert"])
    args = SimpleNamespace(
        sglang_router_ip=ip,
        sglang_router_port=port,
        sglang_model_routers={m: expert for m in (*EXPERT_MODELS, *spec.get("models", ()))},
        hf_checkpoint=spec["hf_checkpoint"],
        rollout_max_response_len=1024,
        rollout_max_context_len=None,
        partial_rollout=False,
        apply_chat_template=False,
        reward_key=spec.get("reward_key"),
        n_samples_per_prompt=spec["n_samples"],
        rollout_batch_size=spec["concurrency"],
        retrieval_url=spec["urls"]["retrieve"],
        memagent_chunk_tokens=spec.get("chunk_tokens", 5000),
    )
    if spec["workflow"] in PEER_WORKFLOWS:  # what slime's rollout process has set (its parser's defaults)
        conc = max(512, spec["concurrency"])
        for k, v in {
            "rollout_max_context_len": 16384,
            "rollout_max_response_len": MAX_NEW_TOKENS.get(spec["workflow"], 1024),
            "sglang_server_concurrency": conc,
            "rollout_num_gpus": 1,
            "rollout_num_gpus_per_engine": 1,
            "use_distributed_post": False,
            "sglang_dp_size": None,
            "rollout_temperature": 1.0,
            "rollout_top_p": 1.0,
            "rollout_top_k": -1,
            "rollout_stop": None,
            "rollout_stop_token_ids": None,
            "rollout_skip_special_tokens": False,
            "sglang_enable_deterministic_inference": False,
            "sglang_speculative_algorithm": None,
            "use_rollout_routing_replay": False,
        }.items():
            setattr(args, k, v)
    if spec["system"] == "graphrl":  # slime's --custom-config-path: every key becomes an attribute
        config = Path(spec["module"]).with_name("slime_args.yaml")
        for k, v in (yaml.safe_load(config.read_text()) or {}).items():
            setattr(args, k, v)
    return args


def _with_reward(module: Any):
    """slime's generate_and_rm for one sample: generate, then the reward function into sample.reward."""

    async def generate_and_rm(args: Any, sample: Any, sampling_params: dict) -> Any:
        out = await module.generate(args, sample, sampling_params)
        out.reward = await module.reward_func(args, out)
        return out

    generate_and_rm.__module__ = module.__name__
    return generate_and_rm


def load_generate(spec: dict[str, Any]):
    if spec["system"] == "slime":
        from . import slime_examples

        module = slime_examples.load(spec["slime"])[spec["workflow"]]
        if spec["workflow"] == "search_r1":
            slime_examples.configure_search_r1(module, spec["urls"]["search"], max_turns=4, topk=3)
        return _with_reward(module)
    if spec["system"] == "graphrl":
        path = Path(spec["module"])
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[path.stem] = module
        mod_spec.loader.exec_module(module)
        return _with_reward(module) if spec["workflow"] in PEER_WORKFLOWS else module.generate
    return importlib.import_module(f"benchmarks.baselines.{BASELINES[(spec['workflow'], spec['system'])]}").generate


async def _bench(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.request("POST" if url.endswith("reset") else "GET", url) as r:
        r.raise_for_status()
        return json.loads(await r.read())


async def _drive(
    generate, args, samples: list[Any], concurrency: int, sampling: dict | None = None
) -> tuple[list[Any], list[float]]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    params = sampling or SAMPLING

    async def one(sample: Any) -> Any:
        async with sem:
            t0 = time.perf_counter()
            out = await generate(args, sample, dict(params))
            latencies.append(time.perf_counter() - t0)
            return out

    return await asyncio.gather(*(one(s) for s in samples)), latencies


def _rss() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024.0
    return out


def _schedstat() -> tuple[float, float]:
    """The event loop's thread (this process's main thread): seconds on a CPU and seconds runnable
    but waiting for one (/proc/self/schedstat; zeros where the kernel has no schedstats)."""
    try:
        on_cpu, waiting, _ = Path("/proc/self/schedstat").read_text().split()
        return int(on_cpu) / 1e9, int(waiting) / 1e9
    except (OSError, ValueError):
        return 0.0, 0.0


def machine_busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy (all cores, /proc/stat: everything but idle and
    iowait) -- the client, the simulated server and the python tool's processes together; NaN where
    there is no /proc/stat. (Here, not in `benchmarks.sandbox`, which imports graphrl: a baseline's
    cell process never loads graphrl.)"""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


class GcClock:
    """CPU time (`time.thread_time`) the cyclic garbage collector spends while entered, through
    `gc.callbacks`; `full_passes` counts the generation-2 collections among them."""

    def __init__(self) -> None:
        self.seconds, self.full_passes, self._start = 0.0, 0, 0.0

    def _on(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.thread_time()
        else:
            self.seconds += time.thread_time() - self._start
            self.full_passes += info.get("generation") == 2

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on)


async def _run(spec: dict[str, Any]) -> dict[str, Any]:
    timed = install(spec["hf_checkpoint"], graphrl=spec["system"] == "graphrl")
    generate = load_generate(spec)
    args = make_args(spec)
    rows = read_jsonl(Path(spec["data"]))
    if spec["workflow"] in ("toolorchestra", "search_r1"):  # the graph's input for the retrieval service
        for row in rows:
            row["metadata"]["retrieval_url"] = spec["urls"]["search" if spec["workflow"] == "search_r1" else "retrieve"]
    samples, warm = _samples(spec, rows, timed)
    if spec["system"] == "slime":
        from . import slime_examples

        slime_examples.prepare(args, timed)
    sampling = {**SAMPLING, "max_new_tokens": MAX_NEW_TOKENS.get(spec["workflow"], SAMPLING["max_new_tokens"])}
    urls = spec["urls"]
    async with aiohttp.ClientSession() as http:
        if warm:
            await _drive(generate, args, warm, len(warm), sampling)
        for role in ("policy", "expert"):
            await _bench(http, urls[role] + "/bench/reset")
        gc.collect()
        _reset_peak()
        rss0 = _rss()["VmRSS"]
        enc0, dec0 = timed.clock.encode_s, timed.clock.decode_s
        sched0, busy0 = _schedstat(), machine_busy_s()
        collector = GcClock()
        sampler = CpuSampler() if spec.get("stacks") else None  # benchmarks.stacks: the timed section only
        cpu0, t0 = time.process_time(), time.perf_counter()
        with collector:
            if sampler is not None:
                sampler.start()
            try:
                results, latencies = await _drive(generate, args, samples, spec["concurrency"], sampling)
            finally:
                stacks = sampler.stop() if sampler is not None else None
        wall, cpu, enc = time.perf_counter() - t0, time.process_time() - cpu0, timed.clock.encode_s - enc0
        sched = [b - a for a, b in zip(sched0, _schedstat())]
        busy = machine_busy_s() - busy0
        dec = timed.clock.decode_s - dec0
        mem = _rss()
        logs = {role: (await _bench(http, urls[role] + "/bench/log"))["log"] for role in ("policy", "expert")}
    await _close(spec["system"], generate)
    rollouts = {s.session_id: as_list(r) for s, r in zip(samples, results)}
    flat = [x for r in rollouts.values() for x in r]
    stats = request_stats(logs)
    calls = max(stats["calls"], 1)
    if stacks is not None:
        meta = {k: spec.get(k) for k in ("workflow", "system", "concurrency", "code_rate")}
        write_stacks(
            Path(spec["stacks"]), stacks, {**meta, "repeat": spec.get("tags", {}).get("repeat"), "calls": calls}
        )
    rewards = [sum(_reward(x) for x in r) for r in rollouts.values()]
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}  # graphrl's error per failed sample (the first 160 characters), by count
    for x in flat:
        statuses[x.status.name.lower()] = statuses.get(x.status.name.lower(), 0) + 1
        error = ((getattr(x, "metadata", None) or {}).get("graphrl") or {}).get("error")
        if error:
            key = error[:160]
            errors[key] = errors.get(key, 0) + 1
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
        # the event loop's thread: share of the wall time on a CPU, and runnable but waiting for one
        "loop_cpu_use": sched[0] / wall,
        "loop_wait": sched[1] / wall,
        "cpu_ms_per_call": 1e3 * cpu / calls,
        # the whole machine's busy CPU over the timed section, per LLM call (client + server + tools)
        "machine_cpu_ms_per_call": 1e3 * busy / calls,
        "tokenise_ms_per_call": 1e3 * enc / calls,
        # the cyclic garbage collector's passes (part of cpu_ms_per_call), and how many of them were full
        "gc_ms_per_call": 1e3 * collector.seconds / calls,
        "gc_full_passes": collector.full_passes,
        "decode_ms_per_call": 1e3 * dec / calls,
        "overhead_ms_per_call": 1e3 * (cpu - enc) / calls,
        "policy_calls": stats.get("policy", {}).get("calls", 0),
        "rss_peak_mb": mem["VmHWM"],
        "rss_growth_mb": mem["VmHWM"] - rss0,
        "mean_reward": statistics.fmean(rewards) if rewards else 0.0,
        "statuses": statuses,
        "errors": errors,
        **{
            k: stats[k] for k in ("calls", "prompt_tokens", "cached_tokens", "hit_rate", "work_digest", "prompt_digest")
        },
        "policy_hit_rate": stats.get("policy", {}).get("hit_rate", 0.0),
        **audit_samples(rollouts, logs["policy"]),
        **(context_mismatches(rollouts, logs["policy"]) if spec["workflow"] in PEER_WORKFLOWS else {}),
        **spec.get("tags", {}),
        **({"logs": logs} if spec.get("keep_logs") else {}),
    }


def _samples(spec: dict[str, Any], rows: list[dict], timed: Any) -> tuple[list[Any], list[Any]]:
    """The timed samples and the warm-up ones (other sessions). slime's examples get slime's own
    `Sample`s from slime's data loader over the peer rows (`peer_data`), numbered the same way."""
    n_warm = spec.get("warmup") or 0
    if spec["system"] != "slime":
        warm = samples_for(rows[:n_warm], 1)
        for w in warm:
            w.session_id, w.index = f"warm-{w.index}", 10**6 + w.index
        return samples_for(rows, spec["n_samples"]), warm
    from . import slime_examples

    label = "reward_model" if spec["workflow"] == "search_r1" else "label"
    loaded = slime_examples.dataset(Path(spec["peer_data"]), timed, label_key=label)
    samples = []
    for g, base in enumerate(loaded):
        for k in range(spec["n_samples"]):
            s = copy.deepcopy(base)
            s.index, s.group_index, s.session_id = g * spec["n_samples"] + k, g, f"s{g * spec['n_samples'] + k:06d}"
            samples.append(s)
    warm = [copy.deepcopy(b) for b in loaded[:n_warm]]
    for i, w in enumerate(warm):
        w.index, w.group_index, w.session_id = 10**6 + i, 10**6 + i, f"warm-{i}"
    return samples, warm


async def _close(system: str, generate: Any) -> None:
    """Close the HTTP sessions of this event loop (graphrl's engines through the compiled module's
    target: a benchmark-only reach into its internals)."""
    if system == "slime":
        from . import slime_examples

        await slime_examples.close()
        return
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
