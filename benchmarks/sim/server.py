"""The simulated serving stack, one process: `python -m benchmarks.sim.server [options]`.

Serves, on free local ports:
  policy   SGLang's /generate (graphrl's `make_app` over a `SimEngine`): the trained model
  expert   SGLang's /generate for every frozen expert model, plus POST /retrieve (a retrieval
           service stub: {queries, topk} -> {"result": [[{"id", "contents"}, ...]]} after
           `retrieve_s`)
and on both: POST /bench/reset (empty logs, call counters, prefix cache), GET /bench/log (the
per-session call log, for the audit). Prints one JSON line {"policy", "expert", "retrieve"} (URLs)
on stdout once listening, then serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

from aiohttp import web

from graphrl.engines._json import dumps, loads
from graphrl.engines.server import make_app, serving

from .engine import Latency, SimEngine
from .text import seeded, sentence
from .turns import Shape, TurnWriter

ENGINE_KEY = web.AppKey("bench_engine", SimEngine)


def _json(obj) -> web.Response:
    return web.Response(body=dumps(obj), content_type="application/json")


async def _reset(request: web.Request) -> web.Response:
    request.app[ENGINE_KEY].reset()
    return _json({"ok": True})


async def _log(request: web.Request) -> web.Response:
    return _json({"role": request.app[ENGINE_KEY].role, "log": request.app[ENGINE_KEY].log})


def _retrieve_handler(seed: int, delay_s: float):
    async def retrieve(request: web.Request) -> web.Response:
        body = loads(await request.read())
        query = (body.get("queries") or [""])[0]
        topk = int(body.get("topk", 3))
        rng = seeded(seed, "retrieve", query)
        docs = [
            {
                "id": str(rng.randrange(10**6)),
                "contents": f'"{sentence(rng).split(" near ")[-1].rstrip(".")}"\n{sentence(rng)} {sentence(rng)}',
            }
            for _ in range(topk)
        ]
        await asyncio.sleep(delay_s)
        return _json({"result": [docs]})

    return retrieve


def build_apps(
    tokenizer, *, seed: int, latency: Latency, shape: Shape, retrieve_s: float, prefix_capacity_tokens: int
) -> dict[str, web.Application]:
    writer = TurnWriter(tokenizer, seed, shape)
    apps = {}
    for role in ("policy", "expert"):
        engine = SimEngine(role, writer, latency, prefix_capacity_tokens=prefix_capacity_tokens)
        app = make_app(engine, tokenizer, model_path=f"sim-{role}")
        app[ENGINE_KEY] = engine
        app.router.add_post("/bench/reset", _reset)
        app.router.add_get("/bench/log", _log)
        if role == "expert":
            app.router.add_post("/retrieve", _retrieve_handler(seed, retrieve_s))
        apps[role] = app
    return apps


async def _main(ns: argparse.Namespace) -> None:
    from graphrl.models.tokenizer import qwen_tokenizer

    latency = Latency(ns.per_request_s, ns.per_output_token_s, ns.per_prefill_token_s)
    shape = Shape(noncanonical_rate=ns.noncanonical_rate, code_rate=ns.code_rate)
    apps = build_apps(
        qwen_tokenizer(),
        seed=ns.seed,
        latency=latency,
        shape=shape,
        retrieve_s=ns.retrieve_s,
        prefix_capacity_tokens=ns.prefix_capacity_tokens,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(apps["policy"]) as policy, serving(apps["expert"]) as expert:
        print(json.dumps({"policy": policy, "expert": expert, "retrieve": expert + "/retrieve"}), flush=True)
        await stop.wait()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-request-s", type=float, default=Latency.per_request_s)
    p.add_argument("--per-output-token-s", type=float, default=Latency.per_output_token_s)
    p.add_argument("--per-prefill-token-s", type=float, default=Latency.per_prefill_token_s)
    p.add_argument("--retrieve-s", type=float, default=0.015)
    p.add_argument("--noncanonical-rate", type=float, default=Shape.noncanonical_rate)
    p.add_argument("--code-rate", type=float, default=Shape.code_rate)
    p.add_argument("--prefix-capacity-tokens", type=int, default=4_000_000)
    return p


def main(argv: list[str] | None = None) -> None:
    asyncio.run(_main(parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
