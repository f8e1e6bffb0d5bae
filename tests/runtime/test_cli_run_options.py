"""`graphrl run` options added for the demo: --max-new-tokens-cap, --metadata KEY=VALUE."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from graphrl.app.run import cap_max_tokens
from graphrl.cli.run import parse_metadata as _metadata
from graphrl.compilers.lower import plan_from_path
from graphrl.spec.model import LLMNode

REPO = Path(__file__).resolve().parents[2]


def test_cap_clamps_every_llm_node_and_nothing_else():
    plan, _ = plan_from_path(REPO / "graphs" / "memagent.yaml")
    capped = cap_max_tokens(plan, 64)
    assert {n: x.max_tokens for n, x in capped.nodes.items() if isinstance(x, LLMNode)} == {
        "memorize": 64,
        "answer": 64,
    }
    assert {n: x.max_tokens for n, x in plan.nodes.items() if isinstance(x, LLMNode)} == {
        "memorize": 1024,
        "answer": 256,
    }
    assert cap_max_tokens(plan, 512).nodes["answer"].max_tokens == 256  # a cap above a node's limit changes nothing
    assert capped.nodes["check_context"] == plan.nodes["check_context"]


def test_metadata_values_are_json_when_they_parse():
    assert _metadata(("retrieval_url=http://127.0.0.1:8000", "n=3", 'flags={"a": true}', "empty=")) == {
        "retrieval_url": "http://127.0.0.1:8000",
        "n": 3,
        "flags": {"a": True},
        "empty": "",
    }
    with pytest.raises(click.BadParameter, match="KEY=VALUE"):
        _metadata(("novalue",))
