"""Trajectory -> Chrome trace JSON (the Trace Event Format; opens in Perfetto and chrome://tracing).

Input: a `Trajectory`. Output: a dict {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.

Mapping: one process per prompt group (pid = group + 1), one thread per sample of the group
(tid = n + 1); a complete event ("X") for the whole rollout and one per node visit along its path,
placed one after another from the rollout's start (each call's `start_s` when the trajectory has it,
else the end of the previous one: trajectory files record latencies, not wall-clock starts); a node
visit without an engine call (switch, update) is an instant event ("i"). Times are microseconds.

Invariants: pure and deterministic; every event has name, ph, ts, pid, tid; args carry the call's
tokens, cached tokens, finish reason, endpoint, cost and error.
"""

from __future__ import annotations

from typing import Any

from .trajectory import Rollout, Trajectory, scalar_reward


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _events(r: Rollout) -> list[dict[str, Any]]:
    pid, tid = r.group + 1, r.n + 1
    calls = [dict(c) for c in r.calls]
    used = [False] * len(calls)
    steps: list[tuple[str, int, list[dict[str, Any]]]] = []
    for node, visit in r.path:
        mine = []
        for k, c in enumerate(calls):
            if not used[k] and c.get("node") == node and c.get("visit") == visit:
                used[k] = True
                mine.append(c)
        steps.append((node, visit, mine))
    steps += [(str(c.get("node")), int(c.get("visit") or 0), [c]) for k, c in enumerate(calls) if not used[k]]
    out: list[dict[str, Any]] = []
    t = 0.0
    for node, visit, mine in steps:
        name = f"{node} #{visit}"
        if not mine:
            out.append({"name": name, "cat": "node", "ph": "i", "s": "t", "ts": _us(t), "pid": pid, "tid": tid})
            continue
        for c in mine:
            start = float(c["start_s"]) if c.get("start_s") is not None else t
            dur = float(c.get("latency_s") or 0.0)
            args = {
                k: c.get(k)
                for k in (
                    "endpoint",
                    "prompt_tokens",
                    "completion_tokens",
                    "cached_tokens",
                    "finish_reason",
                    "cost",
                    "error",
                )
                if c.get(k) is not None
            }
            out.append(
                {
                    "name": name,
                    "cat": "tool" if str(c.get("endpoint", "")).startswith("tool:") else "llm",
                    "ph": "X",
                    "ts": _us(start),
                    "dur": _us(dur),
                    "pid": pid,
                    "tid": tid,
                    "args": args,
                }
            )
            t = max(t, start + dur)
    total = max(r.elapsed_s, t)
    head = {
        "name": f"rollout {r.rollout_id}",
        "cat": "rollout",
        "ph": "X",
        "ts": 0.0,
        "dur": _us(total),
        "pid": pid,
        "tid": tid,
        "args": {
            "status": r.status,
            "reward": scalar_reward(r.reward),
            "samples": len(r.samples),
            "trained_tokens": sum(s.trained for s in r.samples),
            "engine_s": r.engine_s,
            **({"error": r.error} if r.error else {}),
        },
    }
    return [head, *out]


def chrome_trace(traj: Trajectory) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for g in traj.groups():
        events.append(
            {"name": "process_name", "ph": "M", "pid": g + 1, "tid": 0, "args": {"name": f"prompt group {g}"}}
        )
        events.append({"name": "process_sort_index", "ph": "M", "pid": g + 1, "tid": 0, "args": {"sort_index": g}})
    for r in traj.rollouts:
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": r.group + 1,
                "tid": r.n + 1,
                "args": {"name": f"sample {r.n} (rollout {r.rollout_id})"},
            }
        )
        events += _events(r)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"source": traj.source, "graph": traj.graph or "", "generator": "graphrl visualize"},
    }
