"""Results -> the printed tables: per workflow and concurrency, each system's medians over repeats,
the graphrl/careful ratios, the scaling table, and the verdict on each target.

Input: the list of cell result dicts (benchmarks.client) and the scaling result dicts.
Output: markdown text (what `benchmarks.run` prints and docs/performance.md quotes).
"""

from __future__ import annotations

import statistics
from typing import Any

SYSTEMS = ("graphrl", "careful", "text")
NUMERIC = (
    "wall_s",
    "rollouts_per_s",
    "latency_p50_s",
    "latency_p99_s",
    "cpu_ms_per_call",
    "tokenise_ms_per_call",
    "decode_ms_per_call",
    "overhead_ms_per_call",
    "rss_peak_mb",
    "rss_growth_mb",
    "machine_cpu_ms_per_call",  # absent from runs saved before it was measured
)


def merge(cells: list[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """(workflow, concurrency, system) -> the median over repeats of the timings; counts from the
    first repeat (they are identical across repeats: same data, seeds and server)."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["workflow"], c["concurrency"], c["system"]), []).append(c)
    out = {}
    for key, runs in groups.items():
        row = dict(runs[0])
        for k in NUMERIC:
            if all(k in r for r in runs):
                row[k] = statistics.median(r[k] for r in runs)
        row["repeats"] = len(runs)
        row["walls"] = [round(r["wall_s"], 3) for r in runs]
        out[key] = row
    return out


def _f(x: float, nd: int = 2) -> str:
    return f"{x:.{nd}f}"


def cell_table(merged: dict, workflow: str) -> str:
    head = (
        "| system | conc | rollouts | rollouts/s | p50 s | p99 s | CPU ms/call | tokenise ms/call | "
        "CPU excl. tokenise ms/call (of it decode) | LLM calls | prompt tokens | cache hit (policy / all) | "
        "mismatched tokens (turns) | peak RSS MB (growth) | mean reward |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for conc in sorted({k[1] for k in merged if k[0] == workflow}):
        for system in SYSTEMS:
            r = merged.get((workflow, conc, system))
            if r is None:
                continue
            lines.append(
                f"| {system} | {conc} | {r['rollouts']} | {_f(r['rollouts_per_s'])} | {_f(r['latency_p50_s'])} | "
                f"{_f(r['latency_p99_s'])} | {_f(r['cpu_ms_per_call'])} | {_f(r['tokenise_ms_per_call'])} | "
                f"{_f(r['overhead_ms_per_call'])} ({_f(r.get('decode_ms_per_call', 0.0))}) | {r['calls']} | "
                f"{r['prompt_tokens']} | "
                f"{r['policy_hit_rate']:.3f} / {r['hit_rate']:.3f} | {r['mismatch_tokens']} ({r['mismatch_turns']}) | "
                f"{r['rss_peak_mb']:.0f} ({r['rss_growth_mb']:+.0f}) | {r['mean_reward']:.3f} |"
            )
    return "\n".join(lines)


def _ratio(g: dict, c: dict, key: str) -> str:
    """g / c for a figure that older saved runs lack ("n/a" there)."""
    return f"{g[key] / c[key]:.2f}" if g.get(key) and c.get(key) else "n/a"


def ratio_table(merged: dict, workflow: str) -> str:
    head = (
        "| conc | wall | rollouts/s | p50 | p99 | CPU/call | CPU excl. tokenise/call | machine CPU/call | "
        "cache hit (policy) | peak RSS | same requests as careful |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for conc in sorted({k[1] for k in merged if k[0] == workflow}):
        g, c = merged.get((workflow, conc, "graphrl")), merged.get((workflow, conc, "careful"))
        if g is None or c is None:
            continue
        q = lambda k: g[k] / c[k] if c[k] else float("nan")
        same = "yes" if (g["prompt_digest"], g["work_digest"]) == (c["prompt_digest"], c["work_digest"]) else "NO"
        lines.append(
            f"| {conc} | {q('wall_s'):.3f} | {q('rollouts_per_s'):.3f} | {q('latency_p50_s'):.3f} | "
            f"{q('latency_p99_s'):.3f} | {q('cpu_ms_per_call'):.2f} | {q('overhead_ms_per_call'):.2f} | "
            f"{_ratio(g, c, 'machine_cpu_ms_per_call')} | {q('policy_hit_rate'):.3f} | {q('rss_peak_mb'):.2f} | {same} |"
        )
    return "\n".join(lines)


def scaling_table(rows: list[dict[str, Any]]) -> str:
    """Per chunk: CPU / memorize calls; "marginal": the extra CPU (excl. tokenisation) per extra
    chunk from the previous size -- flat when nothing grows with the document."""
    head = (
        "| system | chunks per document | rollouts | LLM calls | CPU ms/chunk | tokenise ms/chunk | "
        "CPU excl. tokenise ms/chunk | marginal CPU excl. tokenise ms/chunk | wall s | mismatched tokens |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    prev: dict[str, tuple[int, float]] = {}
    for r in sorted(rows, key=lambda r: (r["system"] != "graphrl", r["system"], r["chunks"])):
        n = max(r["calls"] - r["rollouts"], 1)  # memorize calls = chunks processed
        rest = r["overhead_ms_per_call"] * r["calls"]  # ms, all rollouts
        marginal = "-"
        if r["system"] in prev and r["chunks"] > prev[r["system"]][0]:
            c0, rest0 = prev[r["system"]]
            marginal = f"{(rest - rest0) / (r['rollouts'] * (r['chunks'] - c0)):.3f}"
        prev[r["system"]] = (r["chunks"], rest)
        lines.append(
            f"| {r['system']} | {r['chunks']} | {r['rollouts']} | {r['calls']} | "
            f"{1e3 * r['cpu_s'] / n:.3f} | {r['tokenise_ms_per_call'] * r['calls'] / n:.3f} | "
            f"{rest / n:.3f} | {marginal} | {r['wall_s']:.2f} | {r['mismatch_tokens']} |"
        )
    return "\n".join(lines)


# The targets (docs/performance.md): wall time no worse than the careful loop's, and at most 0.1 ms of
# client CPU per LLM call on top of what it spends; zero mismatches; prefix-cache hits no lower. The CPU
# target is judged twice: excluding tokenisation (the Rust encode, which both systems call; what the
# issue first measured) and including it (what the rollout process spends: graphrl's prompt-piece memo
# spends Python to save Rust time, which only this figure weighs).
WALL_TARGET = 1.00
EXTRA_CPU_TARGET_MS = 0.1


def verdicts(merged: dict, extra_budget_ms: float = EXTRA_CPU_TARGET_MS, wall_budget: float = WALL_TARGET) -> list[str]:
    out = []
    for (wf, conc, system), g in sorted(merged.items()):
        if system != "graphrl":
            continue
        c = merged.get((wf, conc, "careful"))
        t = merged.get((wf, conc, "text"))
        if c is None:
            continue
        ratio = g["wall_s"] / c["wall_s"]
        extra = g["overhead_ms_per_call"] - c["overhead_ms_per_call"]  # what the framework adds per call
        total = g["cpu_ms_per_call"] - c["cpu_ms_per_call"]  # the same, tokenisation included
        # graphrl must have sent the careful loop's very requests (a failed tool call changes the next
        # prompt): else time and CPU are for other work, and neither target can be judged
        same = all(g.get(k) == c.get(k) for k in ("prompt_digest", "work_digest"))
        judged = lambda ok: ("PASS" if ok else "MISS") if same else "NOT COMPARABLE: other requests than careful"
        out.append(
            f"{wf} c={conc}: wall {ratio:.3f}x careful [{judged(ratio <= wall_budget + 1e-9)}]; "
            f"graphrl - careful CPU excl. tokenise {extra:+.3f} ms/call "
            f"[{judged(extra <= extra_budget_ms + 1e-9)}] ({g['overhead_ms_per_call']:.3f} vs "
            f"{c['overhead_ms_per_call']:.3f}); "
            f"graphrl - careful CPU, tokenisation included, {total:+.3f} ms/call [{judged(total <= extra_budget_ms + 1e-9)}] "
            f"({g['cpu_ms_per_call'] / c['cpu_ms_per_call']:.3f}x careful); "
            f"mismatches graphrl {g['mismatch_tokens']} / careful "
            f"{c['mismatch_tokens']} / text {t['mismatch_tokens'] if t else 'n/a'} "
            f"[{'PASS' if g['mismatch_tokens'] == 0 else 'MISS'}]; policy cache hit {g['policy_hit_rate']:.3f} vs "
            f"{c['policy_hit_rate']:.3f} [{'PASS' if g['policy_hit_rate'] >= c['policy_hit_rate'] - 1e-12 else 'MISS'}]"
        )
    return out


def peer_table(merged: dict, workflow: str, systems: tuple[str, ...] = ("graphrl", "slime")) -> str:
    """benchmarks.peers: one row per (concurrency, system)."""
    head = (
        "| system | conc | rollouts | rollouts/s | wall s | p50 s | p99 s | CPU ms/call | tokenise ms/call | "
        "CPU excl. tokenise ms/call | LLM calls | prompt tokens | prefix-cache hit | mismatched tokens (turns) | "
        "calls whose prompt is not the sample's prefix | peak RSS MB | mean reward | statuses |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for conc in sorted({k[1] for k in merged if k[0] == workflow}):
        for system in systems:
            r = merged.get((workflow, conc, system))
            if r is None:
                continue
            statuses = ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))
            lines.append(
                f"| {system} | {conc} | {r['rollouts']} | {_f(r['rollouts_per_s'])} | {_f(r['wall_s'])} | "
                f"{_f(r['latency_p50_s'])} | {_f(r['latency_p99_s'])} | {_f(r['cpu_ms_per_call'])} | "
                f"{_f(r['tokenise_ms_per_call'])} | {_f(r['overhead_ms_per_call'])} | {r['calls']} | "
                f"{r['prompt_tokens']} | {r['hit_rate']:.3f} | {r['mismatch_tokens']} ({r['mismatch_turns']}) | "
                f"{r.get('context_mismatches', 0)} of {r.get('context_calls', 0)} | {r['rss_peak_mb']:.0f} | "
                f"{r['mean_reward']:.3f} | {statuses} |"
            )
    return "\n".join(lines)


def peer_ratios(merged: dict, workflow: str) -> str:
    head = "| conc | wall | p99 | CPU/call | CPU excl. tokenise/call | graphrl - slime CPU ms/call | prefix-cache hit |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for conc in sorted({k[1] for k in merged if k[0] == workflow}):
        g, s = merged.get((workflow, conc, "graphrl")), merged.get((workflow, conc, "slime"))
        if g is None or s is None:
            continue
        q = lambda k: g[k] / s[k] if s[k] else float("nan")
        lines.append(
            f"| {conc} | {q('wall_s'):.3f} | {q('latency_p99_s'):.3f} | {q('cpu_ms_per_call'):.2f} | "
            f"{q('overhead_ms_per_call'):.2f} | {g['cpu_ms_per_call'] - s['cpu_ms_per_call']:+.2f} | "
            f"{g['hit_rate']:.3f} vs {s['hit_rate']:.3f} |"
        )
    return "\n".join(lines)
