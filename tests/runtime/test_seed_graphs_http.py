"""Each bundled graph runs with the tiny model over HTTP: `graphrl serve --model tiny` in a subprocess,
the real SGLang client for the policy and every frozen model, the demo's data and services.

Pins what must hold whatever the random model says: every rollout ends with a status and well-formed
samples (ledger invariants), only the graph's trained nodes carry mask 1, every sample of a rollout
shares its rollout id, and the calls went through HTTP (server-reported prompt tokens).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphrl.app.demo import DEMO_RUNS, _data, _service, trained_nodes
from graphrl.app.run import run_plan
from graphrl.compilers.lower import plan_from_path
from graphrl.runtime.ledger import TrainingSample

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from tinyserver import tiny_server as serve_tiny


@pytest.fixture(scope="module")
def tiny_url():
    with serve_tiny() as url:
        yield url


@pytest.mark.slow
@pytest.mark.parametrize("run", DEMO_RUNS, ids=[r.graph for r in DEMO_RUNS])
def test_bundled_graph_over_http(run, tiny_url, tmp_path):
    plan, diags = plan_from_path(ROOT / "graphs" / run.path)
    assert plan is not None, diags
    data = _data(run, ROOT / "data", tmp_path)
    out = tmp_path / "traj.jsonl"
    endpoints = {name: tiny_url for name in plan.models if name != "policy"}
    with _service(run, ROOT / "data") as metadata:
        summary = run_plan(
            plan,
            data,
            out,
            engine="sglang",
            url=tiny_url,
            tokenizer="qwen",
            endpoints=endpoints,
            n_samples=run.n_samples,
            limit=run.limit,
            concurrency=4,
            seed=0,
            max_tokens_cap=12,
            metadata=metadata,
            progress=False,
        )
    assert summary.rollouts == run.limit * run.n_samples
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines
    trained = set(trained_nodes(plan))  # a sub-graph's under qualified names (solve/draft)
    by_rollout: dict = {}
    for rec in lines:
        assert rec["status"] in ("completed", "truncated", "aborted", "failed")
        by_rollout.setdefault(rec["rollout_id"], []).append(rec)
        if rec["num_samples"] == 0:
            continue
        s = TrainingSample.from_json(rec)
        s.check_invariants()
        for sp in s.spans:
            if sp.mask:
                assert sp.node in trained and sp.kind == "generated"
    for rid, recs in by_rollout.items():
        assert {r["rollout_id"] for r in recs} == {rid}
        first = next(r for r in recs if "rollout" in r)
        llm_calls = [c for c in first["rollout"]["calls"] if not c["endpoint"].startswith("tool:")]
        assert llm_calls and all(c["prompt_tokens"] > 0 for c in llm_calls)
