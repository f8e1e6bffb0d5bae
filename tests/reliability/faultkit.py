"""Shared helpers for the reliability tests (imported by name: `from faultkit import ...`).

`FaultySGLangServerForTests` speaks SGLang's native `/generate` protocol (docs/architecture.md, slime contract §4) from
its own thread and event loop, and decides per request -- by a seeded rule, reproducible whatever
the interleaving -- whether to answer normally or to inject one fault:

    http500, http503         an HTTP error status with a JSON error body
    reset                    200 with a Content-Length, half the body, then the connection is closed
    hang                     no answer until the client goes away (or `hang_s`)
    bad_json                 200 with a truncated JSON document
    no_logprobs              200 with output_ids but no meta_info.output_token_logprobs
    count_mismatch           200 where output_ids has one more id than output_token_logprobs
    abort                    200, finish_reason abort, the first half of the reply's tokens
    length                   200, finish_reason length, the first half of the reply's tokens

Every request is recorded (`Served`) under its routing key (`X-SMG-Routing-Key`, the rollout's
session id), so a test counts exactly what the server saw per rollout and checks that each
generated span of a training sample is exactly the ids the server returned for exactly the tokens
before it. `check_rollout` / `check_slime_sample` hold every ledger check the tests share.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import random
import re
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from graphrl.compilers.lower import plan_from_path
from graphrl.engines.server import serving
from graphrl.models.tokenizer import QWEN_TOKEN_IDS
from graphrl.runtime.ledger import STATUSES, TrainingSample

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SLIME_TESTS = REPO / "tests" / "compilers" / "slime"
IM_END = QWEN_TOKEN_IDS["<|im_end|>"]

ERROR_KINDS = ("http500", "http503", "reset", "hang", "bad_json", "no_logprobs", "count_mismatch")
PARTIAL_KINDS = ("abort", "length")
KINDS = ERROR_KINDS + PARTIAL_KINDS
# what the rollout's error says for each kind that raises EngineError in the client
ERROR_TEXT = {
    "http500": "answered HTTP 500",
    "http503": "answered HTTP 503",
    "reset": "failed after the request was sent",
    "hang": "timed out after",
    "bad_json": "invalid JSON",
    "no_logprobs": "no output_token_logprobs",
    "count_mismatch": "disagree with output_token_logprobs",
}

FaultRule = Callable[[str, int], "str | None"]  # (session, k-th request of that session) -> kind or None


def seeded_faults(rate: float, seed: int = 0, kinds: Iterable[str] = KINDS) -> FaultRule:
    """Each request independently faulted with probability `rate`, kind chosen uniformly; the choice
    depends only on (seed, session, k), never on timing."""
    kinds = tuple(kinds)

    def rule(session: str, k: int) -> str | None:
        rng = random.Random(f"{seed}/{session}/{k}")
        return rng.choice(kinds) if rng.random() < rate else None

    return rule


def scripted_faults(*kinds: str | None) -> FaultRule:
    """The k-th request of every session gets kinds[k] (None: a normal reply; past the end: normal)."""
    return lambda session, k: kinds[k] if k < len(kinds) else None


def agent_reply(prompt: str) -> str:
    """The default model: call the lookup tool until it has seen one tool response, then answer."""
    if "<tool_response>" not in prompt:
        return '<tool_call>\n{"name": "lookup", "arguments": {"query": "the answer"}}\n</tool_call>'
    return "The answer is 42"


def logprob_for(i: int, token: int) -> float:
    """Distinct per position and token, so a misaligned log-prob is visible."""
    return -round(0.01 + (token % 97) / 100 + i / 1000, 6)


@dataclass
class Served:
    """One /generate request as the server saw it (and what it answered)."""

    session: str | None
    k: int  # index among this session's requests
    rid: str | None
    kind: str  # "ok" or one of KINDS
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()


class FaultySGLangServerForTests:
    """An SGLang-protocol server injecting seeded faults (see the module docstring). Test use only.

    `reply(prompt_text) -> text` is the model (default `agent_reply`); its ids are the text's
    tokens plus `<|im_end|>`, cut at `max_new_tokens` with finish "length" as a real server would.
    `delay_s` delays every answer (to make concurrency visible); `hang_s` bounds a hang.
    """

    def __init__(
        self,
        tok,
        *,
        faults: FaultRule | None = None,
        reply: Callable[[str], str] | None = None,
        delay_s: float = 0.0,
        hang_s: float = 30.0,
        port: int = 0,
    ):
        self.tok = tok
        self.port = port
        self._backend = getattr(tok, "backend_tokenizer", None)
        self.faults = faults or (lambda s, k: None)
        self.reply = reply or agent_reply
        self.delay_s = delay_s
        self.hang_s = hang_s
        self.url = ""
        self.by_session: dict[str | None, list[Served]] = {}
        self.aborts: list[str] = []
        self.counts: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> FaultySGLangServerForTests:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="faulty-sglang", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"fault server did not start: {self._error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def _main(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # pragma: no cover - reported by __enter__
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort)
        app.router.add_get("/health", self._health)
        async with serving(app, port=self.port) as url:
            self.url = url
            self._ready.set()
            await self._stop.wait()

    # -- records ------------------------------------------------------------------------------
    def take(self, session: str | None) -> list[Served]:
        """Remove and return what the server saw for one session (keeps soak memory flat)."""
        with self._lock:
            return self.by_session.pop(session, [])

    def seen(self, session: str | None) -> list[Served]:
        with self._lock:
            return list(self.by_session.get(session, ()))

    def all_served(self) -> list[Served]:
        with self._lock:
            return [s for v in self.by_session.values() for s in v]

    # -- handlers -----------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _abort(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        with self._lock:
            self.aborts.append(body.get("rid"))
        return web.Response(text="ok")

    def _encode(self, text: str) -> list[int]:
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self.tok.encode(text, add_special_tokens=False))

    def _decode(self, ids: list[int]) -> str:
        if self._backend is not None:
            return self._backend.decode(ids, skip_special_tokens=False)
        return self.tok.decode(ids, skip_special_tokens=False)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        session = request.headers.get("X-SMG-Routing-Key")
        ids = [int(t) for t in body["input_ids"]]
        params = body.get("sampling_params") or {}
        with self._lock:
            records = self.by_session.setdefault(session, [])
            k = len(records)
            kind = self.faults(session or "", k) or "ok"
            rec = Served(session, k, body.get("rid"), kind, tuple(ids))
            records.append(rec)
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, rec, ids, params)
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _answer(self, request: web.Request, rec: Served, ids: list[int], params: Mapping[str, Any]):
        kind = rec.kind
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if kind in ("http500", "http503"):
            status = int(kind[4:])
            return web.json_response({"error": {"message": f"injected {status}", "code": status}}, status=status)
        if kind == "hang":
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.hang_s)
            return web.json_response({"error": {"message": "hung"}}, status=503)
        out = self._encode(self.reply(self._decode(ids))) + [IM_END]
        finish: dict[str, Any] = {"type": "stop", "matched": IM_END}
        limit = params.get("max_new_tokens")
        if isinstance(limit, int) and len(out) > limit:
            out, finish = out[:limit], {"type": "length", "length": limit}
        if kind in PARTIAL_KINDS:
            out = out[: max(1, (len(out) - 1) // 2)]
            finish = (
                {"type": "abort", "message": "injected abort"}
                if kind == "abort"
                else {"type": "length", "length": len(out)}
            )
        lps = [logprob_for(i, t) for i, t in enumerate(out)]
        entries = [[lp, t, None] for lp, t in zip(lps, out)]
        meta: dict[str, Any] = {
            "id": rec.rid,
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "output_token_logprobs": entries,
            "weight_version": "fault-v1",
        }
        reply = {"text": self._decode(out), "output_ids": list(out), "meta_info": meta}
        if kind == "no_logprobs":
            del meta["output_token_logprobs"]
        elif kind == "count_mismatch":
            reply["output_ids"] = list(out) + [out[-1]]
        if kind in ("ok",) + PARTIAL_KINDS:
            rec.output_ids, rec.logprobs = tuple(out), tuple(lps)
        payload = json.dumps(reply).encode()
        if kind == "bad_json":
            return web.Response(body=payload[: len(payload) // 2], content_type="application/json")
        if kind == "reset":
            resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            resp.content_length = len(payload)
            await resp.prepare(request)
            await resp.write(payload[: len(payload) // 2])
            request.transport.close()
            return resp
        return web.Response(body=payload, content_type="application/json")


# ---------------------------------------------------------------------------------------- graphs

SOAK_TOOL = '''"""The soak graph's tool: a deterministic lookup (what a retrieval tool would answer)."""


def lookup(query):
    return f"lookup({query!r}): the answer is 42"
'''

SOAK_GRAPH = """\
# A multi-turn agent: one append-only thread; the policy calls a tool until it has an answer. One
# sample per rollout: on_drift: fail (the default, new_sample, makes a re-rendered thread fan out).
name: soak
inputs: {q: prompt, gold: label}
threads:
  main:
    on_drift: fail
    prompt:
      - system: "Use the lookup tool, then answer."
      - user: "{{ q }}"
nodes:
  act:
    llm: policy
    thread: main
    max_tokens: 64
    max_visits: 3
    parse: {tool_calls: calls, default: {calls: []}}
    next:
      - {when: "act.calls", goto: look}
      - goto: end
  look:
    tool: soak_tool:lookup
    args: {query: "{{ act.calls[0].arguments['query'] | default('') }}"}
    max_chars: 200
    append_to: main
    next: act
reward:
  fn: sub_em
  args: {prediction: "{{ act.text }}", label: "{{ gold }}"}
"""


def write_graph(directory: Path, text: str, name: str = "g.yaml", tools: Mapping[str, str] | None = None):
    """Write a graph (and tool modules next to it) and plan it; returns the plan."""
    directory.mkdir(parents=True, exist_ok=True)
    for module, source in (tools or {}).items():
        (directory / f"{module}.py").write_text(source, encoding="utf-8")
    path = directory / name
    path.write_text(text, encoding="utf-8")
    plan, diags = plan_from_path(path)
    assert plan is not None, "\n".join(str(d) for d in diags)
    return plan


def soak_plan(directory: Path):
    return write_graph(directory, SOAK_GRAPH, "soak.yaml", {"soak_tool": SOAK_TOOL})


def executor_over_http(plan, url: str, tok, *, caps: Mapping[str, int] | None = None, **engine_kw):
    """An Executor whose every model is the real SGLang client pointed at `url` (tools and rewards
    resolved next to the graph file). Close with `await ex.endpoints.close()`."""
    from graphrl.engines.sglang import SGLangEngine
    from graphrl.rewards.scorer import RewardBox
    from graphrl.runtime.chat import ChatRenderer
    from graphrl.runtime.executor import Executor
    from graphrl.runtime.services import StaticEndpoints
    from graphrl.tools.registry import ToolBox

    engine = SGLangEngine(url, **engine_kw)
    eps = StaticEndpoints({name: engine for name in plan.models}, ChatRenderer(tok), max_concurrency=caps)
    search = [Path(plan.source["file"]).parent]
    return Executor(
        plan,
        eps,
        tools=ToolBox(search),
        rewards=RewardBox(search),
        sampling={"temperature": 1.0, "top_p": 1.0, "top_k": -1},
    )


def rollout_input(i: int, row: Mapping[str, Any] | None = None, *, prefix: str = "r"):
    from graphrl.runtime.executor import RolloutInput

    return RolloutInput(
        row=row or {"prompt": f"question {i}", "label": "42"}, rollout_id=i, group=i, session_id=f"{prefix}-{i}"
    )


# ---------------------------------------------------------------------------------------- checks


def expected_mask(plan, span) -> int:
    """Mask 1 exactly on tokens a trained policy node generated into its own sample."""
    node = plan.nodes.get(span.node)
    trained = getattr(node, "trained", False) and getattr(node, "sample_mode", "none") in ("call", "thread")
    return 1 if span.kind == "generated" and trained else 0


def check_sample_ledger(plan, s: TrainingSample, served: list[Served]) -> None:
    """Invariants 1, 2, 5 on one sample, against what the server actually sent."""
    s.check_invariants()
    replies = {(r.input_ids, r.output_ids): r.logprobs for r in served if r.output_ids}
    p = s.prompt_length
    for sp in s.spans:
        assert sp.mask == expected_mask(plan, sp), f"mask {sp.mask} on {sp}"
        lps = s.rollout_log_probs[sp.start : sp.end]
        if sp.mask == 0:
            assert not any(lps), f"non-zero log-probs under mask 0 in {sp}"
        if sp.kind != "generated":
            continue
        key = (s.tokens[: p + sp.start], s.tokens[p + sp.start : p + sp.end])
        assert key in replies, f"span {sp} is not a reply the server sent for exactly the tokens before it"
        if sp.mask == 1:
            assert tuple(lps) == replies[key], f"log-probs of {sp} are not the server's"


def check_rollout(plan, res, served: list[Served], *, retries: int = 0) -> str:
    """Every check on one executor rollout; returns the kind of fault it met ("ok" if none).

    - statuses: an EngineError kind -> failed with that kind's error text; else abort -> aborted;
      a length finish on the last call -> truncated; otherwise completed;
    - ledger invariants on every sample, siblings share the rollout id;
    - requests the server saw == engine calls recorded + the call that failed (+ allowed retries):
      nothing was retried that was not allowed to be."""
    assert res.status in STATUSES, res.status
    kinds = [r.kind for r in served]
    errors = [k for k in kinds if k in ERROR_KINDS]
    policy_calls = [c for c in res.calls if not c.endpoint.startswith("tool:")]
    if errors:
        kind = errors[0]
        assert res.status == "failed", (kinds, res.status, res.error)
        assert ERROR_TEXT[kind] in (res.error or ""), (kind, res.error)
        assert res.reward is None
        assert len(served) == len(policy_calls) + 1 + retries, (kinds, [c.node for c in res.calls])
        assert all(k not in ERROR_KINDS for k in kinds[: -1 - retries]) and kinds[-1] == kind
    else:
        kind = next((k for k in kinds if k in PARTIAL_KINDS), "ok")
        assert len(served) == len(policy_calls), (kinds, [c.node for c in res.calls])
        if "abort" in kinds:
            assert res.status == "aborted" and kinds[-1] == "abort", (kinds, res.status, res.error)
            assert res.reward is None and "engine aborted" in res.error
        elif policy_calls and policy_calls[-1].finish_reason == "length":
            assert res.status == "truncated", (kinds, res.status, res.error)
        else:
            assert res.status == "completed", (kinds, res.status, res.error)
    for s in res.samples:
        check_sample_ledger(plan, s, served)
        assert s.rollout_id == res.rollout_id
        if res.status in ("failed", "aborted"):
            assert s.status == res.status and s.reward is None
    return kind


def check_slime_sample(plan, sample, served: list[Served]) -> None:
    """A filled slime Sample: slime's shape, and the spans graphrl records checked like a ledger."""
    info = sample.metadata["graphrl"]
    n = sample.response_length
    assert n >= 1 and len(sample.tokens) - n >= 1
    assert len(sample.loss_mask) == n == len(sample.rollout_log_probs)
    status = sample.status.value
    assert status == info["status"] or info.get("placeholder") or status in ("truncated", "completed")
    if status in ("failed", "aborted"):
        assert sample.remove_sample is True and sample.reward == 0.0
    if info.get("placeholder"):
        assert sample.loss_mask == [0] and sample.rollout_log_probs == [0.0]
        return
    from graphrl.runtime.ledger import Span

    ts = TrainingSample(
        tokens=tuple(sample.tokens),
        response_length=n,
        loss_mask=tuple(sample.loss_mask),
        rollout_log_probs=tuple(sample.rollout_log_probs),
        spans=tuple(Span.from_json(x) for x in info["spans"]),
        status=status,
    )
    check_sample_ledger(plan, ts, served)


# ---------------------------------------------------------------------------------------- memory


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def memory_now() -> tuple[int, int]:
    """(bytes traced by tracemalloc after a full collection, RSS)."""
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    return traced, rss_bytes()


def slime_standin():
    """tests/compilers/slime/slime_standin.py (the slime target's own Sample stand-in)."""
    if str(SLIME_TESTS) not in sys.path:
        sys.path.insert(0, str(SLIME_TESTS))
    import slime_standin

    return slime_standin


def located(message: str) -> bool:
    """`path:line:col:` at the start of a message."""
    return re.match(r"^[^\s:][^:]*:\d+:\d+: ", message) is not None


@dataclass
class Stopwatch:
    t0: float = field(default_factory=time.monotonic)

    @property
    def s(self) -> float:
        return time.monotonic() - self.t0
