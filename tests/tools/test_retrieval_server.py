"""The embedded BM25 retrieval service: corpus -> POST /retrieve {queries, topk} / GET /health."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

pytest.importorskip("bm25s")

from graphrl.tools.retrieval import retrieve
from graphrl.tools.retrieval_server import BM25Index, CorpusError, read_corpus, retrieval_service

REPO = Path(__file__).resolve().parents[2]
DOCS = [
    {"id": "dune", "title": "Dune (novel)", "contents": "Dune is a 1965 science fiction novel by Frank Herbert."},
    {"id": "paris", "title": "Paris", "contents": "Paris is the capital and largest city of France."},
    {"id": "rust", "title": "Rust", "contents": "Rust is a programming language focused on memory safety."},
    {"title": "Herbert", "contents": "Frank Herbert was an American writer born in Tacoma."},
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return path


def post(url: str, body, path="/retrieve"):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(url + path, data=body if isinstance(body, str) else json.dumps(body)) as r:
                return r.status, await r.json()

    return asyncio.run(go())


def get(url: str, path: str):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.get(url + path) as r:
                return r.status, await r.json()

    return asyncio.run(go())


def test_read_corpus_defaults_ids_and_reports_bad_lines(tmp_path, corpus):
    docs = read_corpus(corpus)
    assert [d["id"] for d in docs] == ["dune", "paris", "rust", "3"] and docs[3]["title"] == "Herbert"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"contents": "ok"}\n{"title": "no contents"}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: a document needs a string 'contents'"):
        read_corpus(bad)
    bad.write_text('{"text": "ok"}\nnot json\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2:\d+: not valid JSON"):
        read_corpus(bad)


def test_bm25_ranks_the_matching_document_first(corpus):
    index = BM25Index(read_corpus(corpus))
    ((hits,),) = [index.search(["who wrote the novel Dune"], 3)]
    assert hits[0]["id"] == "dune" and hits[0]["score"] > 0
    assert all(a["score"] >= b["score"] for a, b in zip(hits, hits[1:]))
    both = index.search(["Frank Herbert birthplace", "capital of France"], 2)
    assert {d["id"] for d in both[0]} == {"dune", "3"} and both[1][0]["id"] == "paris"
    assert index.search(["zzzz qqqq", "the of a"], 3) == [[], []]  # no known word: nothing, not an error


def test_http_protocol(corpus):
    with retrieval_service(corpus) as url:
        assert get(url, "/health") == (200, {"status": "ok", "documents": 4})
        status, body = post(url, {"queries": ["capital of France", "memory safe programming"], "topk": 1})
        assert status == 200
        assert [[d["id"] for d in r] for r in body["result"]] == [["paris"], ["rust"]]
        assert set(body["result"][0][0]) == {"id", "title", "contents", "score"}
        assert post(url, {"queries": ["Dune"]})[1]["result"][0][0]["id"] == "dune"  # topk defaults to 3
        for bad, msg in (
            (("not json"), "JSON"),
            ({"queries": [1]}, "list of strings"),
            ({"queries": ["x"], "topk": 0}, "topk"),
            ({"queries": ["x"], "topk": "3"}, "topk"),
        ):
            status, body = post(url, bad)
            assert status == 400 and msg in body["error"]


def test_the_graph_client_reads_the_service(corpus):
    with retrieval_service(corpus) as url:
        res = asyncio.run(retrieve(url, "Frank Herbert Dune novel", 2))
    assert res.ok
    assert res.text.startswith("Doc 1: Dune (novel)\nDune is a 1965 science fiction novel by Frank Herbert.")
    assert "Doc 2: Frank Herbert was an American writer" in res.text and "Doc 3" not in res.text  # title in body: once


def test_the_bundled_demo_corpus_answers_the_demo_questions():
    rows = [json.loads(x) for x in (REPO / "data" / "toolorchestra.jsonl").read_text().splitlines() if x.strip()]
    index = BM25Index(read_corpus(REPO / "data" / "corpus.jsonl"))
    for row in rows:
        hits = index.search([row["prompt"]], 3)[0]
        text = " ".join(h["contents"] for h in hits).lower()
        assert row["label"].lower() in text, (row["prompt"], [h["title"] for h in hits])


def test_cli_serves_until_stopped(corpus):
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphrl.cli", "serve-retrieval", "--corpus", str(corpus), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else url
        assert post(url, {"queries": ["Paris"], "topk": 1})[1]["result"][0][0]["id"] == "paris"
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_reports_a_bad_corpus_without_a_traceback(tmp_path):
    bad = tmp_path / "c.jsonl"
    bad.write_text("{}\n")
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "graphrl.cli", "serve-retrieval", "--corpus", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "needs a string 'contents'" in r.stderr and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 60
