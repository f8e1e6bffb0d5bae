"""Trajectory -> the compact JSON document the HTML trajectory viewer embeds.

Input: a `Trajectory`, a `Vocab` for token texts, the node order of the diagram, a token cap.
Output: a plain dict (JSON-serialisable). Token ids are stored once per file in a vocabulary and
each sample refers to it by local index, packed little-endian (uint16 when the file has at most
65,536 distinct ids, else uint32) and base64-encoded; log-probs are uint16 of round(-logprob * 1000)
(0.001 nats, clipped at -65.535). About 5.3 characters per response token, 2.7 per prompt token.

Invariants:
  * display spans cover each response exactly and never mix loss masks: the graphrl spans are cut
    wherever the loss mask changes and gaps get node '?', so the viewer's trained/masked counts are
    exactly sum(loss_mask) and response_length - sum(loss_mask);
  * the cap: samples are taken in (group, n, index) order while the running token total stays
    within `max_tokens`; a sample past it keeps its table row and spans but no tokens, and the
    notice says how many were left out and how to see them;
  * deterministic for the same inputs.
"""

from __future__ import annotations

import base64
import math
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from .tokens import Vocab
from .trajectory import Rollout, Sample, Trajectory, final_answer, scalar_reward

DEFAULT_MAX_TOKENS = 1_000_000
CALL_FIELDS = (
    "endpoint",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "latency_s",
    "finish_reason",
    "cost",
    "error",
    "start_s",
)


def _b64(arr: array) -> str:
    if sys.byteorder == "big":
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return base64.b64encode(arr.tobytes()).decode("ascii")


def display_spans(s: Sample) -> list[tuple[str, int, int, int, int, str]]:
    """The sample's spans, with gaps filled by node '?' and every span cut where the loss mask changes."""
    n = s.response_length
    spans = sorted(s.spans, key=lambda sp: (sp[2], sp[3]))
    filled, pos = [], 0
    for node, visit, a, b, mask, kind in spans:
        if a < pos:  # overlapping spans: keep the earlier one's tokens
            a = pos
        if a > pos:
            filled.append(("?", 0, pos, a, 0, ""))
        if b > a:
            filled.append((node, visit, a, b, mask, kind))
            pos = b
    if pos < n:
        filled.append(("?", 0, pos, n, 0, ""))
    out = []
    lm = s.loss_mask
    for node, visit, a, b, _mask, kind in filled:
        start = a
        for i in range(a + 1, b + 1):
            if i == b or lm[i] != lm[start]:
                out.append((node, visit, start, i, int(lm[start]), kind))
                start = i
    return out


def _lp_u16(lps: Sequence[float]) -> array:
    """round(-logprob * 1000) clipped to uint16 (NaN -> 65535); numpy when it is installed, else plain Python."""
    try:
        import numpy as np
    except ImportError:
        np = None  # type: ignore[assignment]  # plain Python below
    if np is not None:
        q = np.rint(-np.asarray(lps, dtype=np.float64) * 1000.0)
        q = np.clip(np.nan_to_num(q, nan=65535.0), 0, 65535).astype("<u2")
        return array("H", q.tobytes()) if sys.byteorder == "little" else array("H", q.astype("=u2").tobytes())
    out = array("H")
    for v in lps:
        q = 65535 if math.isnan(v) else int(round(-v * 1000))
        out.append(0 if q < 0 else (65535 if q > 65535 else q))
    return out


class _Index:
    """Node names -> small integers, in first-seen order (the diagram's order first)."""

    def __init__(self, first: Sequence[str]):
        self.names: list[str] = []
        self.at: dict[str, int] = {}
        for n in first:
            self(n)

    def __call__(self, name: str) -> int:
        if name not in self.at:
            self.at[name] = len(self.names)
            self.names.append(name)
        return self.at[name]


def _call_row(c: dict[str, Any], nodes: _Index) -> list[Any]:
    row: list[Any] = [nodes(str(c.get("node", "?"))), int(c.get("visit", 0) or 0)]
    for f in CALL_FIELDS:
        v = c.get(f)
        row.append(round(v, 6) if isinstance(v, float) else v)
    return row


def build_payload(
    traj: Trajectory,
    vocab: Vocab,
    node_order: Sequence[str],
    *,
    roles: dict[str, str] | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    notices: Sequence[str] = (),
    selected: tuple[int | None, int | None] = (None, None),
) -> dict[str, Any]:
    nodes = _Index(node_order)
    kinds = _Index(["generated", "observation", "template", "padding", ""])
    budget = max_tokens
    chosen: list[tuple[Rollout, Sample, bool]] = []
    omitted = 0
    for r in traj.rollouts:
        for s in r.samples:
            keep = len(s.tokens) <= budget
            budget -= len(s.tokens) if keep else 0
            omitted += not keep
            chosen.append((r, s, keep))
    ids = sorted({t for _, s, keep in chosen if keep for t in s.tokens})
    local = {t: i for i, t in enumerate(ids)}
    wide = len(ids) > 65536
    table = vocab.lookup(ids)
    texts = [table[i].text for i in ids]
    raw = {str(k): table[i].raw.hex() for k, i in enumerate(ids) if table[i].text is None}
    special = [k for k, i in enumerate(ids) if table[i].special]

    rollouts: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    for ri, r in enumerate(traj.rollouts):
        path = [[nodes(nd), v] for nd, v in r.path]
        rollouts.append(
            {
                "g": r.group,
                "n": r.n,
                "id": r.rollout_id,
                "status": r.status,
                "reward": r.reward,
                "rs": scalar_reward(r.reward),
                "error": r.error,
                "elapsed": round(r.elapsed_s, 6),
                "engine": round(r.engine_s, 6),
                "path": path,
                "calls": [_call_row(dict(c), nodes) for c in r.calls],
                "samples": [],
                "answer": final_answer(r)[:300],
            }
        )
    by_rollout = {id(r): i for i, r in enumerate(traj.rollouts)}
    for r, s, keep in chosen:
        ri = by_rollout[id(r)]
        rollouts[ri]["samples"].append(len(samples))
        spans = [[nodes(nd), v, a, b, m, kinds(k)] for nd, v, a, b, m, k in display_spans(s)]
        tok = lp = None
        if keep:
            tok = _b64(array("I" if wide else "H", (local[t] for t in s.tokens)))
            lp = _b64(_lp_u16(s.log_probs))
        trained = sum(s.loss_mask)
        samples.append(
            {
                "r": ri,
                "i": s.index,
                "status": s.status,
                "reward": s.reward,
                "rs": scalar_reward(s.reward),
                "pl": s.prompt_length,
                "rl": s.response_length,
                "trained": trained,
                "masked": s.response_length - trained,
                "spans": spans,
                "tok": tok,
                "lp": lp,
            }
        )
    notes = list(notices)
    if omitted:
        notes.append(
            f"{omitted} of {len(chosen)} training samples have no token strip: the file keeps at most "
            f"{max_tokens:,} tokens (--max-tokens). Narrow it with --group G / --sample N, or raise the cap."
        )
    return {
        "format": "graphrl.trajectory-view/1",
        "meta": {
            "graph": traj.graph,
            "source": traj.source,
            "tokenizer": vocab.name,
            "notices": notes,
            "max_tokens": max_tokens,
            "omitted": omitted,
            "group": selected[0],
            "sample": selected[1],
        },
        "nodes": nodes.names,
        "roles": {k: v for k, v in (roles or {}).items()},
        "kinds": kinds.names,
        "call_fields": ["node", "visit", *CALL_FIELDS],
        "vocab": {"wide": wide, "ids": _b64(array("I", ids)), "text": texts, "raw": raw, "special": special},
        "rollouts": rollouts,
        "samples": samples,
    }
