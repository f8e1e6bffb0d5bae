"""LoopSessions and the HTTP clients built on it: one session per event loop, closed with its loop.

slime calls the compiled generate from several loops (its rollout loop, fully_async_rollout's worker
thread, `asyncio.run` per call in scripts); each switch used to open a session and leak the old one.
"""

from __future__ import annotations

import asyncio
import threading

import aiohttp
from aiohttp import web

from graphrl.engines.loop_sessions import LoopSessions
from graphrl.engines.sglang import SGLangEngine
from graphrl.tools.registry import ToolBox


def test_one_session_per_loop_closed_when_the_loop_ends():
    made: list[aiohttp.ClientSession] = []
    sessions = LoopSessions(lambda: made.append(aiohttp.ClientSession()) or made[-1])

    async def use_twice():
        a, b = await sessions.get(), await sessions.get()
        assert a is b and not a.closed
        return a

    for _ in range(5):
        asyncio.run(use_twice())
    assert sessions.opened == len(made) == 5  # one per loop, not one per call
    assert all(s.closed for s in made) and sessions.open_sessions() == 0  # each closed with its loop


def test_close_closes_this_loops_session_and_a_new_one_can_follow():
    sessions = LoopSessions(aiohttp.ClientSession)

    async def main():
        first = await sessions.get()
        await sessions.close()
        second = await sessions.get()
        return first, second

    first, second = asyncio.run(main())
    assert first.closed and second is not first and second.closed  # the second closed at loop end
    assert sessions.opened == 2


def test_two_loops_at_once_keep_their_own_sessions():
    sessions = LoopSessions(aiohttp.ClientSession)
    seen: dict[str, aiohttp.ClientSession] = {}
    barrier = threading.Barrier(2)

    def worker(name):
        async def main():
            s = await sessions.get()
            await asyncio.to_thread(barrier.wait)  # both loops hold their session at the same time
            assert await sessions.get() is s
            seen[name] = s

        asyncio.run(main())

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] is not seen["b"] and sessions.opened == 2 and sessions.open_sessions() == 0


class _ServerThread:
    """An aiohttp server on its own loop in a thread, so clients can come from any loop."""

    def __init__(self, app: web.Application):
        self.loop = asyncio.new_event_loop()
        self.app = app
        self.url = ""
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(30)

    def _serve(self, ready):
        asyncio.set_event_loop(self.loop)
        runner = web.AppRunner(self.app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(runner.cleanup())

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


def _generate_app() -> web.Application:
    async def generate(request):
        await request.read()
        meta = {
            "finish_reason": {"type": "stop", "matched": 7},
            "prompt_tokens": 2,
            "completion_tokens": 1,
            "output_token_logprobs": [[-0.5, 7, None]],
        }
        return web.json_response({"text": "x", "output_ids": [7], "meta_info": meta})

    async def health(request):
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/health", health)
    return app


def _counting_sessions(monkeypatch) -> list[aiohttp.ClientSession]:
    made: list[aiohttp.ClientSession] = []
    real = aiohttp.ClientSession

    def counting(*a, **kw):
        made.append(real(*a, **kw))
        return made[-1]

    monkeypatch.setattr(aiohttp, "ClientSession", counting)
    return made


def test_an_engine_called_from_many_loops_leaks_no_session(monkeypatch):
    server = _ServerThread(_generate_app())
    try:
        made = _counting_sessions(monkeypatch)
        engine = SGLangEngine(server.url)
        for _ in range(6):
            gen = asyncio.run(engine.generate([1, 2], {"max_new_tokens": 1}))
            assert gen.output_ids == (7,)

        async def many_in_one_loop():
            await asyncio.gather(*(engine.generate([1, 2], {"max_new_tokens": 1}) for _ in range(8)))
            assert await engine.health()

        asyncio.run(many_in_one_loop())
        assert len(made) == 7  # 6 loops + 1 loop with 9 calls: one session per loop
        assert all(s.closed for s in made)  # every loop's session closed with it
    finally:
        server.stop()


def test_a_toolbox_called_from_many_loops_leaks_no_session(monkeypatch):
    server = _ServerThread(_retrieval_app())
    try:
        made = _counting_sessions(monkeypatch)
        box = ToolBox()
        for _ in range(3):
            res = asyncio.run(box.call("retrieve", {"url": server.url, "query": "q"}, timeout=10, max_chars=None))
            assert res.ok, res.text
        assert len(made) == 3 and all(s.closed for s in made)
    finally:
        server.stop()


def _retrieval_app() -> web.Application:
    async def retrieve(request):
        await request.read()
        return web.json_response({"result": [[{"document": {"contents": "a doc"}}]]})

    app = web.Application()
    app.router.add_post("/retrieve", retrieve)
    return app
