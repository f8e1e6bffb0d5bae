"""Where a cell's client CPU goes, by category, graphrl against the careful loop:
`python -m benchmarks.run ... --stacks DIR`, then `python -m benchmarks.stacks DIR`.

`benchmarks.run`'s table gives one number per cell -- CPU per LLM call, tokenisation apart -- and
`benchmarks.workflow_cpu` the workflow code alone with the transport taken out. Neither says why the
HTTP cells' difference is larger than the workflow code's. This does: with `--stacks DIR`, each cell's
client process runs a CPU-time stack sampler over its timed section only (the warm-up excluded) and
writes the stacks it saw; this module sums them into categories, in ms of CPU per LLM call, for
every system, and lists the functions whose own time differs most.

The sampler (`CpuSampler`): `setitimer(ITIMER_PROF)` delivers SIGPROF as the process spends CPU
(user + system, all threads); the handler records the main thread's Python stack, weighted by the
process CPU time since the previous sample (`time.process_time`), so the weights add up to the CPU
the section used whatever the kernel's timer granularity. Python runs a signal handler only between
bytecodes, at a function's entry or a loop's jump back, so time in C code (the Rust tokenizer, orjson,
a garbage collection, `bytes.join`) lands on the next Python function entered after it -- the
caller's next callee, or the caller itself. Per function that blurs; per category it holds, because
the categories are chosen at such points: a collection is followed by `client.GcClock`'s callback, a
Rust encode by `tokclock`'s clock, and workflow code's C calls by more workflow code. Benchmark-only
instrumentation: nothing in graphrl is changed.

Categories (`category(stack)`, first match from the leaf frame): tokenisation (the timed Rust encode),
decode (the timed Rust decode), garbage collection, transport and event loop (aiohttp, asyncio,
selectors, yarl, multidict), workflow code (graphrl's package, or the baselines' own modules),
libraries (transformers, jinja2, ...), harness (the benchmark's driver), other.

Input: the directory of `*.stacks.json` files the cells wrote. Output: a Markdown table per workflow
and concurrency: category x system in ms per LLM call (medians over repeats), graphrl - careful,
then the functions (own time, leaf frame) with the largest graphrl - careful difference.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

TRANSPORT = ("/aiohttp/", "/asyncio/", "/selectors.py", "/yarl/", "/multidict/", "/socket.py", "/ssl.py")
# a dataclass __init__ of theirs; graph expressions compiled to Python (graphrl.runtime.fastexpr)
GENERATED = ("<string>: graphrl.", "<string>: benchmarks.baselines.", "<graphrl expression>")
LIBRARIES = ("/site-packages/", "/lib/python3")  # after the categories above: the rest of site-packages and stdlib
CATEGORIES = (
    "tokenisation",
    "decode",
    "garbage collection",
    "transport and event loop",
    "workflow code",
    "libraries",
    "harness",
    "other",
)


class CpuSampler:
    """Stacks of the main thread, sampled as the process spends CPU (module docstring). One per
    process at a time: it owns SIGPROF while started."""

    def __init__(self, interval_s: float = 0.001):
        self.interval_s = interval_s
        self.stacks: Counter[str] = Counter()  # "outer;...;leaf" -> CPU seconds
        self._last = 0.0
        self._previous: Any = None

    def _sample(self, signum: int, frame: FrameType | None) -> None:
        now = time.process_time()
        parts = []
        while frame is not None:
            code = frame.f_code
            where = code.co_filename
            if where == "<string>":  # generated code (a dataclass's __init__): name the class
                owner = frame.f_locals.get("self")
                if owner is not None:
                    where = f"<string>: {type(owner).__module__}.{type(owner).__qualname__}"
            parts.append(f"{code.co_name} ({where})")
            frame = frame.f_back
        self.stacks[";".join(reversed(parts))] += now - self._last
        self._last = now

    def start(self) -> None:
        self._last = time.process_time()
        self._previous = signal.signal(signal.SIGPROF, self._sample)
        signal.setitimer(signal.ITIMER_PROF, self.interval_s, self.interval_s)

    def stop(self) -> Counter[str]:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, self._previous if self._previous is not None else signal.SIG_DFL)
        return self.stacks


def _frame_path(frame: str) -> str:
    return frame[frame.rfind(" (") + 2 : -1] if frame.endswith(")") else frame


def category(stack: str) -> str:
    """The category of one sampled stack ("outer;...;leaf", frames "name (path)")."""
    frames = stack.split(";")
    leaf = frames[-1]
    path = _frame_path(leaf)
    if path.endswith("benchmarks/tokclock.py"):  # the timed wrapper, or the clock it adds to on return
        return "decode" if any(f.startswith(("decode ", "add_decode ")) for f in frames[-3:]) else "tokenisation"
    if path.endswith("benchmarks/client.py") and leaf.startswith("_on "):
        return "garbage collection"
    if any(t in path for t in TRANSPORT):
        return "transport and event loop"
    if "/graphrl/" in path or "/benchmarks/baselines/" in path or path.startswith(GENERATED):
        return "workflow code"
    if any(t in path for t in LIBRARIES):
        return "libraries"
    if "/benchmarks/" in path:
        return "harness"
    return "other"


# from its package on: site-packages first, then the standard library, then the repository's packages
_PREFIX = re.compile(r"^.*/site-packages/|^.*/lib/python3\.\d+/|^.*?/(?=(?:graphrl|benchmarks)/)")


def _short(frame: str) -> str:
    """ "name (path)" with the path from its package (site-packages, the standard library, the repo)."""
    name, _, path = frame.partition(" (")
    return f"{name} ({_PREFIX.sub('', path.rstrip(')'), count=1)})"


def write(path: Path, stacks: Counter[str], meta: dict[str, Any]) -> None:
    """One cell's stacks (seconds) and what the report needs to know of the cell (system, workflow,
    concurrency, code_rate, LLM calls)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "stacks": dict(stacks)}))


def load(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.stacks.json"))]


def summarise(cell: dict[str, Any]) -> tuple[dict[str, float], Counter[str]]:
    """(category -> ms per LLM call, leaf function -> ms per LLM call) of one cell."""
    calls = max(int(cell["calls"]), 1)
    cats: dict[str, float] = dict.fromkeys(CATEGORIES, 0.0)
    leaves: Counter[str] = Counter()
    for stack, seconds in cell["stacks"].items():
        ms = 1e3 * seconds / calls
        cats[category(stack)] += ms
        leaves[_short(stack.rsplit(";", 1)[-1])] += ms
    return cats, leaves


def report(cells: list[dict[str, Any]], top: int = 12) -> str:
    """Markdown: per (workflow, code rate, concurrency), categories x systems and the leaf functions
    that differ most between graphrl and the careful loop (medians over a cell's repeats)."""
    groups: dict[tuple, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for cell in cells:
        key = (cell["workflow"], cell.get("code_rate"), cell["concurrency"])
        groups[key][cell["system"]].append(summarise(cell))
    out = []
    for (workflow, code_rate, conc), by_system in sorted(groups.items(), key=lambda kv: str(kv[0])):
        systems = [s for s in ("graphrl", "careful", "text", "slime") if s in by_system]
        code = "" if code_rate is None else f", code rate {code_rate:g}"
        runs = ", ".join(f"{s} {len(by_system[s])}" for s in systems)
        out.append(f"### {workflow}{code}, concurrency {conc} (runs: {runs}; ms of client CPU per LLM call)\n")
        both = "graphrl" in by_system and "careful" in by_system
        out.append("| category | " + " | ".join(systems) + (" | graphrl - careful |" if both else ""))
        out.append("|---|" + "---|" * (len(systems) + both))
        med: dict[str, dict[str, float]] = {
            s: {c: statistics.median(run[0][c] for run in by_system[s]) for c in CATEGORIES} for s in systems
        }
        for c in (*CATEGORIES, "total"):
            vals = {s: (sum(med[s].values()) if c == "total" else med[s][c]) for s in systems}
            if c != "total" and not any(vals.values()):
                continue
            row = f"| {c} | " + " | ".join(f"{vals[s]:.3f}" for s in systems)
            out.append(row + (f" | {vals['graphrl'] - vals['careful']:+.3f} |" if both else " |"))
        if both:
            leaves = {s: _median_counter([run[1] for run in by_system[s]]) for s in ("graphrl", "careful")}
            diff = Counter(
                {
                    k: leaves["graphrl"][k] - leaves["careful"][k]
                    for k in set(leaves["graphrl"]) | set(leaves["careful"])
                }
            )
            ranked = sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]
            out.append(
                "\nThe sampled leaf frames differing most (C time lands on the next Python function entered), "
                "ms per LLM call:\n"
            )
            out.append("| function | graphrl | careful | difference |")
            out.append("|---|---|---|---|")
            for name, d in ranked:
                out.append(f"| `{name}` | {leaves['graphrl'][name]:.3f} | {leaves['careful'][name]:.3f} | {d:+.3f} |")
        out.append("")
    return "\n".join(out)


def _median_counter(runs: list[Counter[str]]) -> Counter[str]:
    keys = set().union(*runs) if runs else set()
    return Counter({k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.stacks", description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path, help="where `benchmarks.run --stacks DIR` wrote the cells' stacks")
    p.add_argument("--top", type=int, default=12, help="functions listed per cell")
    ns = p.parse_args(argv)
    cells = load(ns.directory)
    if not cells:
        print(f"no *.stacks.json in {ns.directory}: run `python -m benchmarks.run ... --stacks {ns.directory}`")
        return 1
    print(report(cells, ns.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
