"""A latency-simulating Engine: prompt ids -> a `TurnWriter` turn, after a modelled delay.

Input: (prompt ids, SGLang sampling params, session id) as `graphrl.engines.server.make_app` hands
them over. Output: a `Generation` with the turn's ids and log-probs and `cached_tokens` from this
engine's own prefix tracker (so the server reports them as SGLang would).

Latency (asyncio.sleep only, no CPU burnt): per_request_s + per_prefill_token_s x uncached prompt
tokens + per_output_token_s x output tokens. The request stream feeds a radix tree of token
sequences (prompt on admission, prompt + output on completion): an append-only conversation hits
on everything it sent before, a re-tokenised one only up to its first changed token.

Every call is logged per session (kind, output ids, log-probs, finish, prompt length, cached,
prompt digest)
for the audit; `reset()` empties the log, the per-session call counters and the prefix cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphrl.engines.base import FinishReason, Generation
from graphrl.engines.prefix_tracker import PrefixTracker

from .turns import TurnWriter, digest


@dataclass(frozen=True)
class Latency:
    per_request_s: float = 0.02
    per_output_token_s: float = 0.001
    per_prefill_token_s: float = 0.00001

    def of(self, uncached: int, n_out: int) -> float:
        return self.per_request_s + self.per_prefill_token_s * uncached + self.per_output_token_s * n_out


class SimEngine:
    """One simulated model endpoint ("policy" or "expert")."""

    reports_cached_tokens = True  # the server takes cached_tokens from us

    def __init__(self, role: str, writer: TurnWriter, latency: Latency, *, prefix_capacity_tokens: int = 4_000_000):
        self.role = role
        self.writer = writer
        self.latency = latency
        self.prefix = PrefixTracker(prefix_capacity_tokens)
        self._calls: dict[str, int] = {}
        self.log: dict[str, list[list[Any]]] = {}

    def reset(self) -> None:
        self.prefix.clear()
        self._calls.clear()
        self.log.clear()

    async def generate(
        self, input_ids: Sequence[int], sampling_params: Mapping[str, Any], *, session_id: str | None = None
    ) -> Generation:
        session = session_id or f"anon-{digest(input_ids)}"  # no session: the prompt is the key
        call = self._calls.get(session, 0) if session_id else 0
        self._calls[session] = call + 1
        n = len(input_ids)
        cached = min(self.prefix.match(input_ids), max(n - 1, 0))
        self.prefix.insert(input_ids)
        turn = self.writer.write(
            self.role,
            session,
            call,
            input_ids,
            int(sampling_params.get("max_new_tokens") or 1024),
            sampling_params.get("stop"),
        )
        await asyncio.sleep(self.latency.of(n - cached, len(turn.ids)))
        self.prefix.insert(list(input_ids) + list(turn.ids))
        if turn.session is not None and not session_id:  # a client without a routing header
            session = turn.session
        self.log.setdefault(session, []).append(
            [turn.kind, list(turn.ids), list(turn.logprobs), turn.finish["type"], n, cached, digest(input_ids)]
        )
        f = turn.finish
        finish = FinishReason(f["type"], matched=f.get("matched", f.get("length")))
        return Generation(turn.ids, turn.logprobs, finish, text=turn.text, prompt_tokens=n, cached_tokens=cached)
