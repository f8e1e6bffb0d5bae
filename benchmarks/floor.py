"""The transport floor: client CPU of a bare `/generate` call, `python -m benchmarks.floor`.

Starts the simulated server and sends N requests (a 2,000-token prompt, ~150 output tokens with
log-probs) with nothing around them: the careful baselines' client (one aiohttp session, orjson) and
graphrl's SGLangEngine. What they cost per call is the part of "client CPU per LLM call" that no
workflow code can remove on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from .run import Server


async def _measure(urls: dict[str, str], n: int, concurrency: int) -> dict[str, float]:
    from graphrl.engines.sglang import SGLangEngine

    from .baselines import common

    ids = list(range(1000, 3000))
    params = {"max_new_tokens": 1024, "temperature": 1.0, "skip_special_tokens": False, "no_stop_trim": True}
    engine = SGLangEngine(urls["policy"])
    clients = {
        "aiohttp + orjson (baselines)": lambda i: common.generate(
            urls["policy"] + "/generate", ids, params, 1024, f"f{i}"
        ),
        "graphrl SGLangEngine": lambda i: engine.generate(ids, params, session_id=f"g{i}"),
    }
    out = {}
    for name, call in clients.items():
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with sem:
                await call(i)

        await asyncio.gather(*(one(i) for i in range(min(n, 32))))  # warm-up
        cpu = time.process_time()
        await asyncio.gather(*(one(i) for i in range(n)))
        out[name] = 1e3 * (time.process_time() - cpu) / n
    await engine.close()
    await common.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 512])
    ns = p.parse_args(argv)
    server = Server(
        argparse.Namespace(
            seed=0,
            per_request_s=0.005,
            per_output_token_s=0.0,
            per_prefill_token_s=0.0,
            noncanonical_rate=0.0,
            code_rate=0.0,
        )
    )
    try:
        for c in ns.concurrency:
            for name, ms in asyncio.run(_measure(server.urls, ns.requests, c)).items():
                print(f"c={c:<4} {name:<30} {ms:.3f} ms client CPU per call")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
