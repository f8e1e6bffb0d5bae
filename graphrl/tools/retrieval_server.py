"""`graphrl serve-retrieval`: a JSONL corpus -> an embedded BM25 retrieval service over HTTP.

Input: a corpus file, one JSON object per line: `contents` (or `text`), optional `title` and `id`
(default: the line number, from 0). Output: an aiohttp app answering
  POST /retrieve {"queries": [str, ...], "topk": int}
       -> {"result": [[{"id", "title", "contents", "score"}, ...] per query]}   (best first)
  GET  /health -> {"status": "ok", "documents": N}
the protocol `graphrl.tools.retrieval` (and ToolOrchestra's search tool) speaks.

Ranking is BM25 (the `bm25s` library: Lucene variant, k1 1.5, b 0.75) over lower-cased word
tokens of title + contents, English stop words removed. Documents with score 0 (no query word) are
not returned, so a result may hold fewer than topk documents. Searches run in a worker thread, so
the event loop keeps serving. `retrieval_service(corpus)` runs the same server in a background
thread for in-process use (the demo, tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from ..data.jsonl import JsonlError, iter_jsonl
from ..engines.server import serving

MAX_TOPK = 100
MAX_QUERIES = 256


class CorpusError(ValueError):
    pass


def read_corpus(path: str | Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []

    try:
        for lineno, rec in iter_jsonl(path):
            if not isinstance(rec, dict) or not isinstance(rec.get("contents", rec.get("text")), str):
                raise CorpusError(f"{path}:{lineno}: a document needs a string 'contents' (or 'text')")
            docs.append(
                {
                    "id": str(rec.get("id", len(docs))),
                    "title": str(rec.get("title") or ""),
                    "contents": rec.get("contents", rec.get("text")),
                }
            )
    except JsonlError as exc:
        raise CorpusError(str(exc)) from None
    if not docs:
        raise CorpusError(f"{path}: no documents")
    return docs


class BM25Index:
    """Documents -> a BM25 index; `search(queries, topk)` -> per query, the best documents with scores."""

    def __init__(self, docs: list[dict[str, Any]]):
        import bm25s

        self._bm25s = bm25s
        self.docs = docs
        self.model = bm25s.BM25()
        corpus = [f"{d['title']}\n{d['contents']}" for d in docs]
        self.model.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)

    def search(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        k = max(1, min(topk, len(self.docs)))
        out: list[list[dict[str, Any]]] = []
        for q in queries:  # one at a time: a query with no known word must not break the others
            tokens = self._bm25s.tokenize([q], stopwords="en", show_progress=False)
            if not any(tokens.ids):
                out.append([])
                continue
            ids, scores = self.model.retrieve(tokens, k=k, show_progress=False)
            out.append(
                [
                    {**self.docs[int(i)], "score": round(float(s), 6)}
                    for i, s in zip(ids[0], scores[0])
                    if float(s) > 0.0
                ]
            )
        return out


def make_app(index: BM25Index) -> web.Application:
    async def retrieve(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error('the body must be JSON: {"queries": [...], "topk": N}')
        queries = body.get("queries") if isinstance(body, dict) else None
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return _error("'queries' must be a list of strings")
        if len(queries) > MAX_QUERIES:
            return _error(f"at most {MAX_QUERIES} queries per request")
        topk = body.get("topk", 3)
        if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
            return _error(f"'topk' must be an integer from 1 to {MAX_TOPK}")
        result = await asyncio.to_thread(index.search, queries, topk)
        return web.json_response({"result": result})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "documents": len(index.docs)})

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/retrieve", retrieve)
    app.router.add_get("/health", health)
    return app


def _error(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


@contextlib.contextmanager
def retrieval_service(corpus: str | Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `corpus` from a background thread (port 0: a free one); yields the base URL."""
    app = make_app(BM25Index(read_corpus(corpus)))
    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            async with serving(app, host, port) as url:
                ready["url"] = url
                started.set()
                await stop.wait()
        except BaseException as exc:
            ready["error"] = exc
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="graphrl-retrieval", daemon=True)
    thread.start()
    started.wait(30)
    if "url" not in ready:
        thread.join(5)
        loop.close()
        raise RuntimeError(f"retrieval service did not start: {ready.get('error', 'timeout')}")
    try:
        yield ready["url"]
    finally:
        assert stop is not None  # set by main() before `ready` has a url
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()
