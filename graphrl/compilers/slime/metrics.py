"""Per-node rollout metrics for slime's logs (wandb / tensorboard), from what generate stored.

Input: the samples of one rollout step (slime's `--custom-rollout-log-function-path` hook gets them
flattened) or of one eval dataset; each carries `metadata["graphrl"]` (spans, calls, and on one
sample per rollout the rollout's path and every call). Output: a flat {name: float} dict, names under
`graphrl/` (docs/slime.md, section 12):

  graphrl/rollouts                              rollouts in the step
  graphrl/status/<status>                       share of rollouts that ended so
  graphrl/reward_mean                           mean uncredited rollout reward (failed/aborted: 0)
  graphrl/node/<node>/visits                    visits per rollout
  graphrl/node/<node>/generated_tokens          tokens the node's calls generated, per rollout
  graphrl/node/<node>/trained_tokens            of those, tokens with loss mask 1, per rollout
  graphrl/node/<node>/latency_s                 mean latency of one of its calls (engine or tool)
  graphrl/node/<node>/tool_error_rate           share of its tool calls that failed (tool nodes)
  graphrl/node/<node>/reward_mean               mean node reward of its samples (nodes with `reward:`)

Samples graphrl did not produce are skipped; a step without any gives {}.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

PREFIX = "graphrl/"


def node_metrics(samples: list[Any]) -> dict[str, float]:
    infos: dict[Any, dict[str, Any]] = {}  # rollout key -> its rollout-level info
    generated: Counter[str] = Counter()
    trained: Counter[str] = Counter()
    own: dict[str, list[float]] = defaultdict(list)  # role (node) -> its samples' own rewards
    for i, s in enumerate(samples):
        info = (getattr(s, "metadata", None) or {}).get("graphrl")
        if not isinstance(info, dict):
            continue
        rid = getattr(s, "rollout_id", None)
        key = (getattr(s, "group_index", None), ("sample", i) if rid is None else rid)
        prev = infos.get(key)
        if prev is None or ("rollout_calls" in info and "rollout_calls" not in prev):
            infos[key] = info  # the sample that holds the rollout-level part (path, every call)
        if info.get("node_reward") is not None and info.get("role"):
            own[str(info["role"])].append(float(info["node_reward"]))
        for sp in info.get("spans") or ():
            n = int(sp["end"]) - int(sp["start"])
            if sp.get("kind") == "generated":
                generated[sp["node"]] += n
                if sp.get("mask"):
                    trained[sp["node"]] += n
    if not infos:
        return {}
    rollouts = len(infos)
    out: dict[str, float] = {PREFIX + "rollouts": float(rollouts)}
    statuses = Counter(str(info.get("status")) for info in infos.values())
    for status, count in sorted(statuses.items()):
        out[f"{PREFIX}status/{status}"] = count / rollouts
    rewards = [float(info.get("rollout_reward") or 0.0) for info in infos.values() if "rollout_reward" in info]
    if rewards:
        out[PREFIX + "reward_mean"] = sum(rewards) / len(rewards)
    visits: Counter[str] = Counter()
    latency: dict[str, list[float]] = defaultdict(list)
    tool_calls: Counter[str] = Counter()
    tool_errors: Counter[str] = Counter()
    for info in infos.values():
        for node, _visit in info.get("path") or ():
            visits[node] += 1
        for c in info.get("rollout_calls") or ():
            latency[c["node"]].append(float(c.get("latency_s") or 0.0))
            if str(c.get("endpoint", "")).startswith("tool:"):
                tool_calls[c["node"]] += 1
                tool_errors[c["node"]] += 1 if c.get("error") or c.get("finish_reason") == "error" else 0
    for node in sorted(set(visits) | set(generated) | set(latency)):
        base = f"{PREFIX}node/{node}/"
        out[base + "visits"] = visits[node] / rollouts
        out[base + "generated_tokens"] = generated[node] / rollouts
        out[base + "trained_tokens"] = trained[node] / rollouts
        if latency[node]:
            out[base + "latency_s"] = sum(latency[node]) / len(latency[node])
        if tool_calls[node]:
            out[base + "tool_error_rate"] = tool_errors[node] / tool_calls[node]
    for node, values in sorted(own.items()):
        out[f"{PREFIX}node/{node}/reward_mean"] = sum(values) / len(values)
    return out


def eval_node_metrics(data: dict[str, Any]) -> dict[str, float]:
    """slime's eval data ({dataset: {"samples": [...], ...}}) -> metrics under eval/<dataset>/graphrl/."""
    out: dict[str, float] = {}
    for name, entry in data.items():
        samples = entry.get("samples") if isinstance(entry, dict) else None
        for k, v in node_metrics(list(samples or ())).items():
            out[f"eval/{name}/{k}"] = v
    return out
