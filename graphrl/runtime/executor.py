"""The executor: one `Plan` + one data row -> one rollout (training samples, path, calls, reward).

Input: a `Plan`, `Endpoints` (engines + chat renderers per model), a `ToolRunner`, a
`RewardScorer`, base sampling parameters; per rollout a `RolloutInput` (row, ids, seed, session).
Output: `RolloutResult`.

Execution model: nodes run one at a time along the graph's edges (a rollout is sequential; many
rollouts run concurrently on one event loop). llm nodes render a fresh prompt or continue an
append-only thread (`ChatThread`); their engine output ids go into training samples verbatim
(`SampleBuilder`): per call (`sample: call`), per thread (`sample: thread`) or nowhere.

Invariants (docs/architecture.md): sample tokens are exactly the ids sent to and returned by the engine;
only new text is tokenised; masks are 1 only on generated tokens of trained nodes; every sample of
one rollout carries the rollout's id; a fault (engine error, render error, drift, timeout) ends
this rollout with a status and an error message, keeping every sample already built; after an
abort no new engine or tool call starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..plan import Plan
from ..engines.base import EngineError, Generation
from ..spec.model import ABORT, END, POLICY, LLMNode, SwitchNode, ToolNode
from .chat import ChatThread, NotAppendOnlyError
from .ledger import CallRecord, LedgerError, SampleBuilder, TrainingSample, assign_credit
from .parsers import parse_output
from .scope import NodeResult, Renderer, RenderError, merge_state
from .services import Endpoints, RewardScorer, ToolRunner, UnknownModel

HARD_MAX_STEPS = 100_000  # a last-resort bound; checked graphs are bounded long before
FAULTS = (EngineError, RenderError, UnknownModel, NotAppendOnlyError, LedgerError)


class RolloutFault(Exception):
    """Ends one rollout with `status` (e.g. an input missing from the row)."""

    def __init__(self, message: str, status: str = "failed"):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RolloutInput:
    row: Mapping[str, Any]  # {"prompt", "label", "metadata"}
    rollout_id: int | str
    group: int = 0
    seed: int | None = None
    session_id: str | None = None


@dataclass(frozen=True)
class RolloutResult:
    rollout_id: int | str
    group: int
    status: str  # completed | truncated | aborted | failed
    reward: float | dict[str, Any] | None
    samples: tuple[TrainingSample, ...]
    path: tuple[tuple[str, int], ...]
    calls: tuple[CallRecord, ...]
    error: str | None
    state: dict[str, Any]
    elapsed_s: float
    engine_s: float


@dataclass
class _Rollout:
    inp: RolloutInput
    ns: dict[str, Any]
    state: dict[str, Any]
    visits: dict[str, int] = field(default_factory=dict)
    threads: dict[str, ChatThread] = field(default_factory=dict)
    thread_samples: dict[str, SampleBuilder] = field(default_factory=dict)
    owners: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)  # (thread, msg) -> (node, visit)
    samples: list[Any] = field(default_factory=list)  # TrainingSample or SampleBuilder, creation order
    path: list[tuple[str, int]] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    policy_tokens: int = 0
    steps: int = 0
    t0: float = 0.0
    last_finish: str | None = None
    engine_s: float = 0.0
    status: str = "completed"
    error: str | None = None


class Executor:
    def __init__(self, plan: Plan, endpoints: Endpoints, *, tools: ToolRunner, rewards: RewardScorer,
                 sampling: Mapping[str, Any] | None = None, clock=time.monotonic):
        self.plan = plan
        self.endpoints = endpoints
        self.tools = tools
        self.rewards = rewards
        self.sampling = dict(sampling or {})
        self.render = Renderer(plan)
        self.clock = clock

    # ------------------------------------------------------------------ public
    async def close(self) -> None:
        """Release what the tools hold open (HTTP sessions); the endpoints are their owner's to close."""
        close = getattr(self.tools, "close", None)
        if close is not None:
            await close()

    async def run(self, inp: RolloutInput, *, abort: asyncio.Event | None = None) -> RolloutResult:
        t0 = self.clock()
        r = _Rollout(inp=inp, ns={}, state={}, t0=t0)
        timeout = self.plan.limits.timeout_s
        try:
            await asyncio.wait_for(self._execute(r, abort), timeout)
        except asyncio.TimeoutError:
            r.status, r.error = "failed", f"rollout timed out after {timeout:g} s"
        except RolloutFault as exc:
            r.status, r.error = exc.status, str(exc)
        except FAULTS as exc:
            r.status, r.error = "failed", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # noqa: BLE001 - invariant 4: one bad rollout never takes down the batch
            r.status, r.error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        reward = None
        if r.status in ("completed", "truncated") and self.plan.reward is not None:
            try:
                reward = await self._reward(r)
                if reward is None:
                    raise TypeError(f"{self.plan.reward.fn} returned None (a float or a dict is expected)")
                _scalar(reward, self.plan.reward.key)  # a value credit cannot be split from fails here
            except Exception as exc:  # user reward code may raise anything: it fails this rollout only
                reward = None
                r.status, r.error = "failed", f"reward: {type(exc).__name__}: {exc}"
        samples = self._finish_samples(r, reward)
        return RolloutResult(inp.rollout_id, inp.group, r.status, reward, samples, tuple(r.path),
                             tuple(r.calls), r.error, dict(r.state), self.clock() - t0, r.engine_s)

    # ------------------------------------------------------------------ graph walk
    def _init(self, r: _Rollout) -> None:
        row = dict(r.inp.row)
        row.setdefault("metadata", {})
        base = {"prompt": row.get("prompt"), "label": row.get("label"), "metadata": row.get("metadata") or {},
                "row": row}
        r.ns.update(row=row, visits=r.visits, threads={})
        for name, decl in self.plan.inputs.items():
            try:
                value = self.render.expr(("inputs", name, "from"), decl.from_, base)
            except RenderError:
                value = None
            if value is None:
                if decl.required and decl.default is None:
                    raise RolloutFault(f"{self.plan.span('inputs', name)}: input '{name}' ({decl.from_}) "
                                       "is missing from the data row")
                value = decl.default
            r.ns[name] = value
        for name, decl in self.plan.state.items():
            r.state[name] = _copy(decl.default)

    async def _execute(self, r: _Rollout, abort: asyncio.Event | None) -> None:
        self._init(r)
        node_id = self.plan.start
        while node_id not in (END, ABORT):
            if abort is not None and abort.is_set():
                r.status, r.error = "aborted", "aborted by the caller"
                return
            if self._out_of_steps(r):
                return
            node = self.plan.nodes[node_id]
            if self._limited(r, node_id, node):
                node_id = node.on_limit or END
                continue
            node_id = await self._step(r, node_id, node, abort)
            if r.status in ("aborted", "truncated"):
                return
        if node_id == ABORT:
            r.status, r.error = "aborted", "the graph routed to abort"
        elif r.last_finish == "length":
            r.status = "truncated"

    def _out_of_steps(self, r: _Rollout) -> bool:
        """limits.max_steps counts node visits (each foreach item is one); reaching it truncates."""
        max_steps = self.plan.limits.max_steps or HARD_MAX_STEPS
        if r.steps >= max_steps:
            r.status, r.error = "truncated", f"limits.max_steps ({max_steps}) reached"
            return True
        return False

    def _limited(self, r: _Rollout, nid: str, node: Any) -> bool:
        if node.max_visits is not None and r.visits.get(nid, 0) >= node.max_visits:
            return True
        return node.token_budget is not None and r.policy_tokens >= node.token_budget

    async def _step(self, r: _Rollout, nid: str, node: Any, abort: asyncio.Event | None) -> str:
        items: list[Any] = [None]
        if node.foreach is not None:
            items = await self._foreach_items(r, nid, node)
        output: NodeResult | None = None
        for i, item in enumerate(items):
            # each item is a visit: max_visits stops the items early, max_steps truncates the rollout
            if i and (self._out_of_steps(r) or (node.max_visits is not None
                                                 and r.visits.get(nid, 0) >= node.max_visits)):
                break
            r.steps += 1
            r.visits[nid] = r.visits.get(nid, 0) + 1
            visit = r.visits[nid]
            r.path.append((nid, visit))
            ctx = self._ctx(r, visit)
            if node.foreach is not None:
                ctx[node.foreach.as_] = item
                ctx["loop"] = {"index": i, "count": len(items), "first": i == 0, "last": i == len(items) - 1}
            try:
                if isinstance(node, LLMNode):
                    output = await self._llm(r, nid, node, visit, ctx)
                elif isinstance(node, ToolNode):
                    output = await self._tool(r, nid, node, visit, ctx)
                else:
                    output = NodeResult()
            except FAULTS as exc:
                if getattr(node, "on_error", None) is None:
                    raise
                r.ns[nid] = NodeResult(text="", ok=False, error=f"{type(exc).__name__}: {exc}")
                return node.on_error
            if r.status == "aborted":
                return END
            ctx["output"] = output
            ctx[nid] = output
            r.ns[nid] = output
            self._updates(r, nid, node, ctx)
            if node.append_to is not None:
                where = ("nodes", nid, "append_to", "content")
                content = self._plain_text(where, self.render.text(where, node.append_to.content, ctx))
                thread = self._thread(r, node.append_to.thread)
                r.owners[(node.append_to.thread, len(thread.messages))] = (nid, visit)
                thread.add_messages([{"role": node.append_to.role, "content": content}])
            if abort is not None and abort.is_set():
                break
        ctx = self._ctx(r, r.visits.get(nid, 0))
        ctx["output"] = output if output is not None else NodeResult()
        return self._next(nid, node, ctx)

    def _ctx(self, r: _Rollout, visit: int) -> dict[str, Any]:
        ctx = dict(r.ns)
        ctx.update(r.state)
        ctx["visit"] = visit
        ctx["threads"] = {k: list(t.messages) for k, t in r.threads.items()}
        return ctx

    def _next(self, nid: str, node: Any, ctx: dict[str, Any]) -> str:
        if isinstance(node, SwitchNode):
            value = self.render.expr(("nodes", nid, "switch"), node.switch, ctx)
            key = str(value).lower() if isinstance(value, bool) else str(value)
            return node.cases.get(key, node.default or END)
        for i, branch in enumerate(node.next or ()):
            if branch.when is None or self.render.expr(("nodes", nid, "next", i, "when"), branch.when, ctx):
                return branch.goto
        return END

    def _updates(self, r: _Rollout, nid: str, node: Any, ctx: dict[str, Any]) -> None:
        for name, tmpl in node.update.items():
            value = self.render.value(("nodes", nid, "update", name), tmpl, ctx)
            try:
                merge_state(r.state, name, self.plan.state[name], value)
            except (TypeError, KeyError) as exc:
                raise RenderError(self.plan.span("nodes", nid, "update", name), str(exc)) from None
            ctx[name] = r.state[name]

    async def _foreach_items(self, r: _Rollout, nid: str, node: Any) -> list[Any]:
        fe = node.foreach
        value = self.render.expr(("nodes", nid, "foreach", "over"), fe.over, self._ctx(r, 0))
        if fe.chunk_tokens:
            model = node.llm if isinstance(node, LLMNode) and not node.dynamic_model else POLICY
            renderer = self.endpoints.renderer(model)
            text = "" if value is None else str(value)
            # Tokenising a long document is CPU work: keep it off the event loop.
            ids = await asyncio.to_thread(renderer.encode, text)
            step = fe.chunk_tokens
            items = [renderer.decode(ids[i:i + step]) for i in range(0, len(ids), step)]
        else:
            items = list(value or [])
        return items[: fe.max] if fe.max else items

    # ------------------------------------------------------------------ llm nodes
    def _thread(self, r: _Rollout, name: str) -> ChatThread:
        th = r.threads.get(name)
        if th is None:
            decl = self.plan.threads[name]
            ctx = self._ctx(r, 0)
            msgs = self._messages(("threads", name, "prompt"), decl.prompt, ctx)
            tools = self.render.value(("threads", name, "tools"), decl.tools, ctx) if decl.tools else None
            self._plain_text(("threads", name, "tools"), tools)
            th = r.threads[name] = self.endpoints.renderer(POLICY).thread(msgs, tools=tools)
        return th

    def _messages(self, path: tuple, prompt: Any, ctx: dict[str, Any]) -> list[dict[str, Any]]:
        """A prompt's rendered chat messages; data that cannot be a chat message (a `messages:` value
        that is not text or {role, content} mappings, text that is not valid Unicode) is a located
        RenderError, so a bad data row fails its rollout with a message, not an internal error."""
        out: list[dict[str, Any]] = []
        for i, m in enumerate(prompt or ()):
            role = m.role
            value = self.render.value(path + (i, role), m.content, ctx)
            if role != "messages":
                out.append({"role": role, "content": value if isinstance(value, str) else str(value)})
            elif isinstance(value, str):
                out.append({"role": "user", "content": value})
            elif isinstance(value, list) and all(_is_message(x) for x in value):
                out.extend(dict(x) for x in value)
            else:
                bad = next((x for x in value if not _is_message(x)), None) if isinstance(value, list) else value
                raise RenderError(self.plan.span(*path, i), "messages: must give a string or a list of "
                                  "{role, content} mappings (role a string, content a string, a list or null); "
                                  f"got {_excerpt(bad)}")
            self._plain_text(path + (i,), out[-1] if role != "messages" or isinstance(value, str) else value)
        return out

    def _plain_text(self, path: tuple, value: Any) -> Any:
        """`value` unchanged, or a located RenderError when a string in it is not valid Unicode (a lone
        surrogate, e.g. from a JSON escape like \\ud800 in a data row): no tokenizer can encode it."""
        bad = _lone_surrogate(value)
        if bad is not None:
            raise RenderError(self.plan.span(*path), f"text holds a lone surrogate (U+{ord(bad):04X}): "
                              "not valid Unicode, cannot be tokenised")
        return value

    def _params(self, nid: str, node: LLMNode, model: str, renderer) -> dict[str, Any]:
        p = dict(self.sampling)
        decl = self.plan.models.get(model)
        for key, src in (("temperature", "temperature"), ("top_p", "top_p"), ("top_k", "top_k")):
            v = getattr(node, src)
            if v is None and decl is not None:
                v = getattr(decl, src)
            if v is not None:
                p[key] = v
        p["max_new_tokens"] = node.max_tokens
        if node.stop:
            p["stop"] = list(node.stop)
        if node.constrain is not None:
            p.update(node.constrain.sampling_params())
        p["stop_token_ids"] = sorted(set(p.get("stop_token_ids") or ()) | set(renderer.stop_token_ids))
        p.setdefault("skip_special_tokens", False)
        p.setdefault("no_stop_trim", True)
        p.setdefault("spaces_between_special_tokens", False)
        return p

    async def _generate(self, r: _Rollout, model: str, ids: tuple[int, ...], params: dict[str, Any],
                        nid: str, visit: int) -> tuple[Generation, CallRecord]:
        engine = self.endpoints.engine(model)
        sem = self.endpoints.semaphore(model)
        if r.inp.seed is not None:
            params["sampling_seed"] = (r.inp.seed * 1_000_003 + len(r.calls)) % (2**31)
        t0 = self.clock()
        start_s = round(t0 - r.t0, 6)
        if sem is not None:
            async with sem:
                gen = await engine.generate(ids, params, session_id=r.inp.session_id)
        else:
            gen = await engine.generate(ids, params, session_id=r.inp.session_id)
        latency = self.clock() - t0
        r.engine_s += latency
        decl = self.plan.models.get(model)
        price = decl.price if decl else None
        n_out = len(gen.output_ids)
        prompt_tokens = gen.prompt_tokens or len(ids)
        cost = (prompt_tokens * price.input + n_out * price.output) / 1e6 if price else 0.0
        call = CallRecord(node=nid, visit=visit, endpoint=model, prompt_tokens=prompt_tokens,
                          completion_tokens=n_out, cached_tokens=gen.cached_tokens, latency_s=round(latency, 6),
                          finish_reason=gen.finish_reason.type, cost=cost, start_s=start_s)
        r.calls.append(call)
        if model == POLICY:
            r.policy_tokens += len(ids) + n_out
        return gen, call

    async def _llm(self, r: _Rollout, nid: str, node: LLMNode, visit: int, ctx: dict[str, Any]) -> NodeResult:
        model = (self.render.text(("nodes", nid, "llm"), node.llm, ctx).strip() if node.dynamic_model else node.llm)
        if model not in self.plan.models:
            raise UnknownModel(f"{self.plan.span('nodes', nid, 'llm')}: model '{model}' is not declared in the graph")
        renderer = self.endpoints.renderer(model)
        thread = None
        thread_builder = None
        if node.thread:
            thread = self._thread(r, node.thread)
            if node.prompt:
                thread.add_messages(self._messages(("nodes", nid, "prompt"), node.prompt, ctx))
            decl = self.plan.threads[node.thread]
            delta = thread.prepare(decl.on_drift)
            sampled = node.thread in self.plan.training.threads
            if sampled:
                thread_builder = r.thread_samples.get(node.thread)
                if delta.kind == "prompt":
                    thread_builder = SampleBuilder(delta.ids, rollout_id=r.inp.rollout_id)
                    r.thread_samples[node.thread] = thread_builder
                    r.samples.append(thread_builder)
                elif delta.ids:
                    for part in delta.parts:
                        # observation tokens are attributed to the node that appended the message
                        owner = r.owners.get((node.thread, part.message_index), (nid, visit))
                        thread_builder.append(delta.ids[part.start:part.end], mask=0, node=owner[0],
                                              visit=owner[1], kind=part.kind)
            ids = thread.ids
        else:
            ids = renderer.start(self._messages(("nodes", nid, "prompt"), node.prompt, ctx))
        gen, call = await self._generate(r, model, ids, self._params(nid, node, model, renderer), nid, visit)
        r.last_finish = gen.finish_reason.type if model == POLICY or node.sample_mode != "none" else r.last_finish
        mask = 1 if node.trained else 0
        if node.sample_mode == "call":
            b = SampleBuilder(ids, rollout_id=r.inp.rollout_id)
            b.append(gen.output_ids, mask=mask, logprobs=gen.logprobs, node=nid, visit=visit, kind="generated")
            b.record_call(call)
            r.samples.append(b.freeze())
        elif thread_builder is not None:
            thread_builder.append(gen.output_ids, mask=mask if node.sample_mode == "thread" else 0,
                                  logprobs=gen.logprobs, node=nid, visit=visit, kind="generated")
            thread_builder.record_call(call)
        if thread is not None:
            text = thread.add_output(gen.output_ids, gen.finish_reason)
        else:
            text = _strip_stop(renderer, gen.output_ids)
        if gen.finish_reason.type == "abort":
            r.status, r.error = "aborted", f"engine aborted the call of '{nid}'"
        parsed = parse_output(node.parse, text, self._custom_parser)
        result = NodeResult(parsed.fields)
        result.update(text=text, ok=parsed.ok, model=model, finish_reason=gen.finish_reason.type)
        if parsed.error:
            result["parse_error"] = parsed.error
        return result

    def _custom_parser(self, ref: str):
        from .userfns import user_callable

        return user_callable(self.plan, ref)

    # ------------------------------------------------------------------ tools, rewards, samples
    async def _tool(self, r: _Rollout, nid: str, node: ToolNode, visit: int, ctx: dict[str, Any]) -> NodeResult:
        args = self.render.value(("nodes", nid, "args"), node.args, ctx)
        t0 = self.clock()
        res = await self.tools.call(node.tool, args, timeout=node.timeout, max_chars=node.max_chars)
        r.calls.append(CallRecord(node=nid, visit=visit, endpoint=f"tool:{node.tool}", prompt_tokens=0,
                                  completion_tokens=0, latency_s=round(self.clock() - t0, 6),
                                  finish_reason="stop" if res.ok else "error", error=res.error,
                                  start_s=round(t0 - r.t0, 6)))
        out = NodeResult(res.data if isinstance(res.data, dict) else {})
        out.update(text=res.text, ok=res.ok, error=res.error)
        return out

    async def _judge(self, r: _Rollout, model: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        """A judge call for the reward: same endpoint limits and call accounting as any llm call."""
        if model not in self.plan.models:
            raise UnknownModel(f"{self.plan.span('reward', 'judge')}: judge model '{model}' is not declared")
        renderer = self.endpoints.renderer(model)
        ids = renderer.start(messages)
        params = {**self.sampling, "max_new_tokens": max_tokens, "temperature": 0.0,
                  "stop_token_ids": sorted(renderer.stop_token_ids), "skip_special_tokens": False}
        gen, _ = await self._generate(r, model, ids, params, "reward", 1)
        return _strip_stop(renderer, gen.output_ids)

    async def _reward(self, r: _Rollout) -> float | dict[str, Any] | None:
        spec = self.plan.reward
        assert spec is not None
        ctx = self._ctx(r, 0)
        ctx["usage"] = usage(r.calls)
        args = self.render.value(("reward", "args"), spec.args, ctx)
        return await self.rewards.score(spec.fn, args, judge_model=spec.judge,
                                        judge=functools.partial(self._judge, r))

    def _finish_samples(self, r: _Rollout, reward: Any) -> tuple[TrainingSample, ...]:
        frozen: list[TrainingSample] = []
        for s in r.samples:
            if isinstance(s, SampleBuilder):
                try:
                    s = s.freeze()
                except LedgerError:
                    continue  # a thread sample with no response yet: nothing to train on
            frozen.append(s)
        credits: tuple[Any, ...] = (None,) * len(frozen)
        if reward is not None and frozen and self.plan.reward is not None:
            credits = assign_credit(_scalar(reward, self.plan.reward.key), len(frozen), self.plan.reward.credit)
        out = []
        for i, (s, credit) in enumerate(zip(frozen, credits)):
            status = r.status if r.status in ("aborted", "failed") else s.status
            out.append(dataclasses.replace(s, index=i, rollout_id=r.inp.rollout_id, status=status, reward=credit))
        return tuple(out)


def usage(calls: list[CallRecord]) -> dict[str, Any]:
    """What a rollout used, for rewards: cost, latency, tokens, and calls per node and per endpoint."""
    by_node: dict[str, int] = {}
    by_endpoint: dict[str, dict[str, float]] = {}
    for c in calls:
        by_node[c.node] = by_node.get(c.node, 0) + 1
        e = by_endpoint.setdefault(c.endpoint, {"calls": 0, "cost": 0.0, "latency_s": 0.0, "tokens": 0})
        e["calls"] += 1
        e["cost"] += c.cost
        e["latency_s"] += c.latency_s
        e["tokens"] += c.prompt_tokens + c.completion_tokens
    return {"cost": sum(c.cost for c in calls), "latency_s": sum(c.latency_s for c in calls),
            "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
            "calls": by_node, "endpoints": by_endpoint}


def _scalar(reward: Any, key: str | None) -> Any:
    if isinstance(reward, Mapping):
        if key is not None:
            if key not in reward:
                raise KeyError(f"the reward has no key '{key}' (reward.key); it has {sorted(reward)}")
            return float(reward[key])
        numeric = {k: float(v) for k, v in reward.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return numeric
    return float(reward)


def _is_message(x: Any) -> bool:
    return (isinstance(x, Mapping) and isinstance(x.get("role"), str)
            and (x.get("content") is None or isinstance(x.get("content"), (str, list))))


def _excerpt(value: Any, n: int = 80) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:n]}{'...' if len(text) > n else ''}"


def _lone_surrogate(value: Any) -> str | None:
    """The first lone surrogate in the strings of `value` (nested lists/dicts/keys), else None."""
    t = type(value)
    if t is str or (t is not dict and t is not list and isinstance(value, str)):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return value[exc.start]
        return None
    if t is dict or (t is not list and isinstance(value, Mapping)):
        for k, v in value.items():
            bad = _lone_surrogate(k) or _lone_surrogate(v)
            if bad:
                return bad
    elif isinstance(value, (list, tuple)):
        for v in value:
            bad = _lone_surrogate(v)
            if bad:
                return bad
    return None


def _strip_stop(renderer, ids: tuple[int, ...]) -> str:
    if ids and ids[-1] in renderer.stop_token_ids:
        ids = ids[:-1]
    return renderer.decode(ids)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
