"""Fixtures for the viz tests (imported by each test module; deliberately not a conftest.py, so the
name `conftest` stays free for the test directories that import theirs by that name).

`real_run`: tests/fixtures/graphs/multiturn.yaml run over two rows of data/math.jsonl with the
embedded tiny model (random weights, fast), exactly as `graphrl run` does; made once per session
(the cache is keyed by pytest's session temp dir) and shared by every module that imports it.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE_GRAPHS = REPO / "tests" / "fixtures" / "graphs"


@functools.cache
def _run_once(base: str) -> Path:
    from graphrl.app.run import run_plan
    from graphrl.compilers.lower import plan_from_path

    if str(FIXTURE_GRAPHS) not in sys.path:
        sys.path.append(str(FIXTURE_GRAPHS))  # the graph's user tool echo_tool:observe
    out = Path(base) / "viz-real-run" / "multiturn.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    plan, diags = plan_from_path(FIXTURE_GRAPHS / "multiturn.yaml")
    assert plan is not None, diags
    run_plan(
        plan,
        REPO / "data" / "math.jsonl",
        out,
        model="tiny",
        n_samples=2,
        concurrency=4,
        limit=2,
        seed=0,
        progress=False,
    )
    return out


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> Path:
    """A trajectory JSONL written by the real runtime: 2 prompts x 2 samples, 3 policy turns each."""
    pytest.importorskip("transformers", reason="the embedded engine needs the [local] extra")
    return _run_once(str(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope="session")
def real_records(real_run) -> list[dict]:
    return [json.loads(line) for line in real_run.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="session")
def multiturn_graph() -> Path:
    return FIXTURE_GRAPHS / "multiturn.yaml"
