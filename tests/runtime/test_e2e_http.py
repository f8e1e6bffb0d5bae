"""End to end over HTTP: `graphrl serve --model tiny` in a subprocess, the real SGLang client, the
executor and the dataset runner; dozens of concurrent multi-turn rollouts, invariants on every sample.

Every generated span of every sample must be exactly the ids the server returned for a request whose
input ids are exactly the sample's tokens before that span (the tokens sent and received, never
re-encoded); tool observations and template text are masked; trained tokens carry log-probs.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphrl.app.endpoints import build_endpoints
from graphrl.compilers.lower import plan_from_path
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.executor import Executor
from graphrl.runtime.ledger import TrainingSample
from graphrl.runtime.runner import run_dataset
from graphrl.tools.registry import ToolBox

FIXTURES = Path(__file__).parent.parent / "fixtures" / "graphs"
sys.path.insert(0, str(Path(__file__).parent))
from tinyserver import tiny_server as serve_tiny


@pytest.fixture(scope="module")
def tiny_server():
    with serve_tiny() as url:
        yield url


class RecordingEngineForTests:
    """Wraps a real engine and records every (input ids, output ids) pair it saw."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    async def generate(self, input_ids, sampling_params, *, session_id=None):
        gen = await self.inner.generate(input_ids, sampling_params, session_id=session_id)
        self.calls.append((tuple(input_ids), tuple(gen.output_ids)))
        return gen

    async def close(self):
        await self.inner.close()


def test_concurrent_multiturn_rollouts_over_http(tiny_server, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    plan, diags = plan_from_path(FIXTURES / "multiturn.yaml")
    assert plan is not None, diags
    eps = build_endpoints(plan, engine="sglang", url=tiny_server, tokenizer="qwen")
    recorder = RecordingEngineForTests(eps.engine("policy"))
    eps._engines["policy"] = recorder
    executor = Executor(
        plan,
        eps,
        tools=ToolBox([FIXTURES]),
        rewards=RewardBox([FIXTURES]),
        sampling={"temperature": 1.0, "top_p": 1.0, "top_k": -1},
    )
    rows = [{"prompt": f"Question number {i}: what is {i} + {i}?", "label": str(2 * i)} for i in range(8)]
    out = tmp_path / "traj.jsonl"

    async def main():
        try:
            return await run_dataset(
                executor,
                rows,
                out,
                n_samples=4,
                concurrency=32,
                seed=1,
                decode=eps.renderer("policy").decode,
                progress=False,
            )
        finally:
            await eps.close()

    summary = asyncio.run(main())
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert summary.rollouts == 32 and len(lines) == 32  # one thread sample per rollout
    assert len(recorder.calls) == 32 * 3  # three policy turns each
    by_input = {}
    for inp, outp in recorder.calls:
        by_input.setdefault(inp, set()).add(outp)
    assert {(r["group"], r["n"]) for r in lines} == {(g, n) for g in range(8) for n in range(4)}
    for rec in lines:
        assert rec["status"] in ("completed", "truncated"), rec["error"]
        s = TrainingSample.from_json(rec)
        s.check_invariants()
        generated = [sp for sp in s.spans if sp.kind == "generated"]
        assert [sp.visit for sp in generated] == [1, 2, 3]
        for sp in s.spans:
            if sp.kind == "generated":
                assert sp.mask == 1 and sp.node == "turn"
                before = s.tokens[: s.prompt_length + sp.start]
                got = s.tokens[s.prompt_length + sp.start : s.prompt_length + sp.end]
                assert got in by_input[before], "a trained span is not what the server returned"
                assert any(lp != 0.0 for lp in s.rollout_log_probs[sp.start : sp.end])
            else:
                assert sp.mask == 0
                assert all(lp == 0.0 for lp in s.rollout_log_probs[sp.start : sp.end])
        # the observations of the tool made it into the thread as masked tokens
        assert "observation 2: you wrote" in rec["response"]
        assert sum(s.loss_mask) == sum(sp.end - sp.start for sp in generated)
