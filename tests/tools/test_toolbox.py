"""ToolBox: tools by name -> ToolResult; user tools (sync off the loop, async awaited); failures are observations."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from graphrl.engines.server import serving
from graphrl.runtime.services import ToolResult
from graphrl.tools.registry import ToolBox
from graphrl.tools.retrieval import format_docs, retrieve

USER_TOOLS = """
import asyncio, threading, time

def echo(text, n=1):
    return text * n

def info():
    return {"text": "summary", "ok": True, "hits": 3, "thread": threading.current_thread().name}

def failing_dict():
    return {"ok": False, "error": "no results", "text": "nothing found"}

def plain_dict():
    return {"a": 1}

def numbers():
    return [1, 2, 3]

def crash():
    raise KeyError("missing")

async def aecho(text):
    await asyncio.sleep(0.01)
    return "async " + text

async def aslow():
    await asyncio.sleep(10)
    return "late"

def blocking(seconds):
    time.sleep(seconds)
    return threading.current_thread().name
"""


@pytest.fixture
def box(tmp_path):
    (tmp_path / "user_tools_box.py").write_text(USER_TOOLS)
    (tmp_path / "broken_tools_box.py").write_text("raise RuntimeError('cannot load')\n")
    return ToolBox([tmp_path])


def call(box, tool, args=None, timeout=5.0, max_chars=None):
    return asyncio.run(box.call(tool, args or {}, timeout=timeout, max_chars=max_chars))


def test_sync_user_tool_returns_its_string(box):
    assert call(box, "user_tools_box:echo", {"text": "ab", "n": 3}) == ToolResult("ababab", True, None, None)


def test_dict_results_expose_text_ok_error_and_data(box):
    res = call(box, "user_tools_box:info")
    assert res.text == "summary" and res.ok and res.data["hits"] == 3
    assert res.data["thread"] != "MainThread"  # a sync tool runs in a worker thread
    res = call(box, "user_tools_box:failing_dict")
    assert not res.ok and res.error == "no results" and res.text == "nothing found"
    assert call(box, "user_tools_box:plain_dict").text == '{"a": 1}'
    assert call(box, "user_tools_box:numbers").text == "[1, 2, 3]"


def test_async_user_tool_is_awaited(box):
    assert call(box, "user_tools_box:aecho", {"text": "x"}).text == "async x"


def test_output_is_cut_in_the_middle_to_max_chars(box):
    res = call(box, "user_tools_box:echo", {"text": "0123456789", "n": 10}, max_chars=20)
    assert res.ok and res.text.startswith("0123456789") and res.text.endswith("0123456789")
    assert "[80 characters cut]" in res.text
    assert call(box, "user_tools_box:echo", {"text": "short"}, max_chars=20).text == "short"


@pytest.mark.parametrize(
    "tool,args,needle",
    [
        ("user_tools_box:crash", {}, "KeyError"),
        ("user_tools_box:echo", {"wrong": 1}, "TypeError"),  # bad arguments
        ("broken_tools_box:anything", {}, "cannot import module 'broken_tools_box'"),  # import failure
        ("no_such_module_box:fn", {}, "cannot import module 'no_such_module_box'"),
        ("user_tools_box:nope", {}, "has no attribute 'nope'"),
        ("retrieve", {"query": "q"}, "KeyError"),  # a built-in without its url
    ],
)
def test_failures_become_observations(box, tool, args, needle):
    res = call(box, tool, args)
    assert not res.ok and needle in res.text and res.error


def test_async_tool_timeout_is_an_observation(box):
    t0 = time.monotonic()
    res = call(box, "user_tools_box:aslow", timeout=0.2)
    assert time.monotonic() - t0 < 3
    assert not res.ok and res.error == "timeout" and "timed out" in res.text


def test_sync_tools_run_concurrently_off_the_loop(box):
    async def main():
        t0 = time.monotonic()
        got = await asyncio.gather(
            *(box.call("user_tools_box:blocking", {"seconds": 0.4}, timeout=5, max_chars=None) for _ in range(4))
        )
        return got, time.monotonic() - t0

    got, elapsed = asyncio.run(main())
    assert all(r.ok and r.text != "MainThread" for r in got)
    assert elapsed < 1.2  # four 0.4 s sleeps overlapped


def test_python_builtin_through_the_box(box):
    res = call(box, "python", {"code": "print('x' * 100)"}, max_chars=10)
    assert res.ok and res.text.startswith("xxxxx") and "characters cut" in res.text
    res = call(box, "python", {"code": "import time; time.sleep(5)"}, timeout=0.5)
    assert not res.ok and res.error == "timeout"


# ---------------------------------------------------------------- retrieval


class RetrievalServiceForTests:
    def __init__(self, status=200, raw=None):
        self.status = status
        self.raw = raw  # a body sent as it is instead of the documents
        self.bodies = []
        self.content_types = []

    async def handle(self, request):
        self.content_types.append(request.content_type)
        body = await request.json()
        self.bodies.append(body)
        if self.status != 200:
            return web.json_response({"error": "down"}, status=self.status)
        if self.raw is not None:
            return web.Response(body=self.raw, content_type="application/json")
        docs = [
            {"title": "Dune (novel)", "contents": "A 1965 novel by Frank Herbert."},
            {"title": "Herbert", "text": "  Frank Herbert wrote Dune.  "},
            "a bare string",
        ][: body["topk"]]
        return web.json_response({"result": [docs]})

    def app(self):
        app = web.Application()
        app.router.add_post("/retrieve", self.handle)
        return app


def _retrieve(service, query, topk, suffix=""):
    async def main():
        async with serving(service.app()) as url:
            return await retrieve(url + suffix, query, topk, timeout=5)

    return asyncio.run(main())


def test_retrieve_posts_the_query_and_numbers_the_docs():
    service = RetrievalServiceForTests()
    res = _retrieve(service, "who wrote dune", 3)
    assert res.ok
    # a title is prefixed unless the body already holds it
    assert res.text == (
        "Doc 1: Dune (novel)\nA 1965 novel by Frank Herbert.\nDoc 2: Frank Herbert wrote Dune.\nDoc 3: a bare string"
    )
    assert service.bodies == [{"queries": ["who wrote dune"], "topk": 3}]
    assert service.content_types == ["application/json"]
    assert _retrieve(service, "q", 1, suffix="/retrieve/").text == "Doc 1: Dune (novel)\nA 1965 novel by Frank Herbert."


def test_retrieve_failures_are_observations():
    res = _retrieve(RetrievalServiceForTests(status=503), "q", 3)
    assert not res.ok and res.error == "HTTP 503"
    res = asyncio.run(retrieve("http://127.0.0.1:9", "q", timeout=2))  # nothing listens on port 9
    assert not res.ok and "retrieval failed" in res.text
    assert format_docs([]) == "No documents found."
    for raw in (b"<html>busy</html>", b'{"result": [[', b"\xff\xfe"):  # not JSON, cut short, not UTF-8
        res = _retrieve(RetrievalServiceForTests(raw=raw), "q", 3)
        assert not res.ok and res.text.startswith("[retrieval failed: JSONDecodeError"), res.text
    nan = b'{"result": [[{"contents": "a", "score": NaN}]]}'  # what json.dumps writes for a NaN score
    assert _retrieve(RetrievalServiceForTests(raw=nan), "q", 1).text == "Doc 1: a"


def test_toolbox_retrieval_reuses_one_connection_and_close_ends_it():
    service = RetrievalServiceForTests()
    peers = []

    async def handle(request):
        peers.append(request.transport.get_extra_info("peername"))
        return await service.handle(request)

    app = web.Application()
    app.router.add_post("/retrieve", handle)

    async def main():
        box = ToolBox()
        async with serving(app) as url:
            for q in ("a", "b", "c"):
                res = await box.call("retrieve", {"url": url, "query": q, "topk": 1}, timeout=5, max_chars=None)
                assert res.ok, res.text
            session = await box._http.get()
            await box.close()
            assert session.closed
            # after close, the next call opens a new session (and a new connection)
            res = await box.call("retrieve", {"url": url, "query": "d", "topk": 1}, timeout=5, max_chars=None)
            assert res.ok
            await box.close()

    asyncio.run(main())
    assert [b["queries"] for b in service.bodies] == [["a"], ["b"], ["c"], ["d"]]
    assert len(set(peers[:3])) == 1, peers  # keep-alive: one client socket for the first three calls
    assert peers[3] != peers[0]


def test_a_failed_warm_up_is_silent_and_the_first_call_sets_up_again(box, monkeypatch):
    """`warm_up` runs in the background: a failure there is kept inside it (no task error left to
    log), and the first python call runs the one-time set-up again."""
    from graphrl.tools import registry

    sweeps = []
    real = registry.sweep_leftovers

    def sweep():
        sweeps.append(1)
        if len(sweeps) == 1:
            raise OSError("the sweep failed")
        return real()

    monkeypatch.setattr(registry, "sweep_leftovers", sweep)

    async def go():
        try:
            box.warm_up({"python"})
            await asyncio.gather(*box._preparing)  # raised the sweep's error before
            return await box.call("python", {"code": "print(2)"}, timeout=10, max_chars=None)
        finally:
            await box.close()

    res = asyncio.run(go())
    assert res.ok and res.text == "2\n", res.text
    assert len(sweeps) == 2
