"""Can tokenisation leave the event loop? `python -m benchmarks.offload` (about 20 s).

At concurrency 512 graphrl's client is bound by its one event-loop thread, and the Rust tokenizer's
`encode` is about 45% of that thread's CPU (docs/performance.md). Two ways out were measured here
before any was built, so that the answer is a command, not a memory:

1. cost per call of each way to tokenise one text (process CPU, all threads; best of 5 passes over 50
   texts of each size cut from docs/performance.md): `encode` (what graphrl calls), `encode_batch([t])`
   and `encode_batch_fast([t])` (the GIL released, rayon inside; `fast` without character offsets),
   `async_encode` awaited on the loop, `encode` through `loop.run_in_executor` -- and whether every way
   gives the same ids;
2. overlap: the loop runs Python work with socket I/O between steps (as a busy client does) while
   one worker thread tokenises; if the tokenizer let go of the interpreter, the two would take the
   longer of their serial times, not the sum.

Output: two tables. Nothing here is asserted; `tests/benchmarks/test_offload.py` checks the tables'
shape and the ids on a tiny run.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SIZES = (200, 1500, 6000)


def _texts(size: int, n: int) -> list[str]:
    src = (REPO / "docs" / "performance.md").read_text()
    return [src[(i * 997) % (len(src) - size) :][:size] for i in range(n)]


def _ways(backend: Any) -> dict[str, Any]:
    return {
        "encode": lambda t: backend.encode(t, add_special_tokens=False).ids,
        "encode_batch": lambda t: backend.encode_batch([t], add_special_tokens=False)[0].ids,
        "encode_batch_fast": lambda t: backend.encode_batch_fast([t], add_special_tokens=False)[0].ids,
    }


def cost_table(backend: Any, sizes: tuple[int, ...], n: int, passes: int) -> list[str]:
    """us of process CPU per text for each way, and whether all ways gave `encode`'s ids."""
    ways = _ways(backend)
    lines = [
        "| chars | " + " | ".join(ways) + " | async_encode | run_in_executor(encode) | same ids |",
        "|---|" + "---|" * (len(ways) + 3),
    ]
    for size in sizes:
        texts = _texts(size, n)
        cells = []
        for fn in ways.values():
            best = float("inf")
            for _ in range(passes):
                c0 = time.process_time()
                for t in texts:
                    fn(t)
                best = min(best, (time.process_time() - c0) / len(texts))
            cells.append(best)
        cells += asyncio.run(_async_costs(backend, texts, passes))
        same = all(len({tuple(fn(t)) for fn in ways.values()}) == 1 for t in texts)
        lines.append(f"| {size} | " + " | ".join(f"{1e6 * c:.1f}" for c in cells) + f" | {'yes' if same else 'NO'} |")
    return lines


async def _async_costs(backend: Any, texts: list[str], passes: int) -> list[float]:
    loop = asyncio.get_running_loop()
    out = []
    with ThreadPoolExecutor(1) as pool:
        for call in (
            lambda t: backend.async_encode(t, add_special_tokens=False),
            lambda t: loop.run_in_executor(pool, lambda: backend.encode(t, add_special_tokens=False)),
        ):
            best = float("inf")
            for _ in range(passes):
                c0 = time.process_time()
                for t in texts:
                    await call(t)
                best = min(best, (time.process_time() - c0) / len(texts))
            out.append(best)
    return out


def _python_step(n: int = 1500) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


async def _overlap(fn: Any, texts: list[str], steps_per_text: int) -> tuple[float, float, float]:
    """(loop work alone, tokenising alone, both at once through one worker thread), wall seconds."""
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)

    async def loop_work() -> None:
        for _ in range(len(texts) * steps_per_text):
            _python_step()
            a.send(b"x")
            await asyncio.sleep(0)
            b.recv(16)

    t0 = time.perf_counter()
    await loop_work()
    alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    for t in texts:
        fn(t)
    tokenise = time.perf_counter() - t0
    with ThreadPoolExecutor(1) as pool:

        async def worker() -> None:
            for t in texts:
                await loop.run_in_executor(pool, fn, t)

        t0 = time.perf_counter()
        await asyncio.gather(worker(), loop_work())
        both = time.perf_counter() - t0
    a.close()
    b.close()
    return alone, tokenise, both


def overlap_table(backend: Any, size: int, n: int, steps_per_text: int) -> list[str]:
    lines = [
        f"| way (worker thread, {n} texts of {size} chars) | loop work alone s | tokenising alone s | "
        "serial sum s | both at once s | overlap |",
        "|---|---|---|---|---|---|",
    ]
    texts = _texts(size, n)
    for name, fn in _ways(backend).items():
        alone, tok, both = asyncio.run(_overlap(fn, texts, steps_per_text))
        # 0: the sum (nothing ran in parallel); 1: the longer of the two (full overlap)
        overlap = (alone + tok - both) / min(alone, tok)
        lines.append(f"| {name} | {alone:.3f} | {tok:.3f} | {alone + tok:.3f} | {both:.3f} | {overlap:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.offload", description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=50)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--steps", type=int, default=10, help="loop work steps (~60 us each) per text tokenised")
    ns = p.parse_args(argv)
    from graphrl.models.tokenizer import qwen_tokenizer

    backend = qwen_tokenizer().backend_tokenizer
    print("Tokenising one text: us of process CPU per text (all threads), best of", ns.passes, "passes\n")
    print("\n".join(cost_table(backend, tuple(ns.sizes), ns.texts, ns.passes)))
    size = 1500 if 1500 in ns.sizes else ns.sizes[0]
    print("\nThe event loop's work and tokenising in a worker thread at once (overlap 0: none, 1: full)\n")
    print("\n".join(overlap_table(backend, size, ns.texts * 4, ns.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
