"""Synthetic trajectory files for the viz tests: a graphrl-run-shaped JSONL with known counts.

`write_synthetic(path, groups, per_group, response_len)` writes `groups * per_group` rollouts of the
multi-turn shape (turn -> observe -> turn ...): each training sample alternates trained `turn` spans
with masked `observe` spans, so trained/masked counts and span counts are known exactly.
Returns the list of records written (the expected values for assertions).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TURN = 96  # tokens per generated span
OBS = 32  # tokens per observation span


def sample_record(
    rng: random.Random, group: int, n: int, per_group: int, response_len: int, prompt_len: int = 64
) -> dict:
    spans, mask, lps, resp = [], [], [], []
    visit, pos = 1, 0
    while pos < response_len:
        gen = min(TURN, response_len - pos)
        spans.append({"node": "turn", "visit": visit, "start": pos, "end": pos + gen, "mask": 1, "kind": "generated"})
        mask += [1] * gen
        lps += [round(-rng.expovariate(1.5), 4) for _ in range(gen)]
        pos += gen
        obs = min(OBS, response_len - pos)
        if obs:
            spans.append(
                {"node": "observe", "visit": visit, "start": pos, "end": pos + obs, "mask": 0, "kind": "observation"}
            )
            mask += [0] * obs
            lps += [0.0] * obs
            pos += obs
        visit += 1
    # a Zipf-like draw over the Qwen vocabulary: a few thousand frequent ids, a long tail
    resp = [min(int(rng.paretovariate(0.6)) * 7 % 151000, 150999) for _ in range(response_len)]
    prompt = [151644, 8948, 198] + [rng.randrange(200, 30000) for _ in range(prompt_len - 3)]
    path = [[sp["node"], sp["visit"]] for sp in spans]
    calls = [
        {
            "node": nd,
            "visit": v,
            "endpoint": "policy" if nd == "turn" else "tool:echo",
            "prompt_tokens": 100,
            "completion_tokens": TURN if nd == "turn" else 0,
            "cached_tokens": 50,
            "latency_s": 0.01,
            "finish_reason": "stop",
            "cost": 0.0,
            "error": None,
        }
        for nd, v in path
    ]
    reward = float(rng.random() < 0.5)
    return {
        "graph": "multiturn",
        "plan_sha256": None,
        "row_index": group,
        "group": group,
        "n": n,
        "rollout_id": group * per_group + n,
        "sample_index": 0,
        "num_samples": 1,
        "status": "completed",
        "reward": reward,
        "rollout_reward": reward,
        "error": None,
        "index": 0,
        "tokens": prompt + resp,
        "response_length": response_len,
        "loss_mask": mask,
        "rollout_log_probs": lps,
        "spans": spans,
        "calls": calls,
        "metadata": {},
        "response": None,
        "prompt_length": len(prompt),
        "rollout": {"path": path, "calls": calls, "elapsed_s": 0.01 * len(path), "engine_s": 0.01 * len(path)},
        "group_lines": per_group,
    }


def write_synthetic(path: Path, groups: int, per_group: int, response_len: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    recs = [sample_record(rng, g, n, per_group, response_len) for g in range(groups) for n in range(per_group)]
    with open(path, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return recs
