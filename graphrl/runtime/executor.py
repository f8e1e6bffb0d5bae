"""The executor: one `Plan` + one data row -> one rollout (training samples, path, calls, reward).

Input: a `Plan`, `Endpoints` (engines + chat renderers per model), a `ToolRunner`, a
`RewardScorer`, base sampling parameters; per rollout a `RolloutInput` (row, ids, seed, session).
Output: `RolloutResult`.

Execution model: nodes run one at a time along the graph's edges (a rollout is sequential; many
rollouts run concurrently on one event loop; a `foreach` with `parallel: N` runs N items at once,
a `parallel` fork its branch nodes, a `graph` node walks its child plan with a child executor:
`subgraph`, `walk`; their samples join the rollout in item order, `RolloutState.pending`).
What a node does is its kind's handler (`graphrl.runtime.handlers`); llm nodes render a fresh prompt
or continue an append-only thread (`TrainedThread`, which grows the thread's sample with it), and
their engine output ids go into training samples verbatim: per call (`sample: call`), per thread
(`sample: thread`) or nowhere. What a finished rollout means for training is `runtime.outcome`'s.

Invariants (docs/architecture.md): sample tokens are exactly the ids sent to and returned by the engine;
only new text is tokenised; masks are 1 only on generated tokens of trained nodes; every sample of
one rollout carries the rollout's id; a fault (engine error, render error, drift, timeout) ends
this rollout with a status and an error message, keeping every sample already built; after an
abort no new engine or tool call starts. The caller's abort signal (`AbortSignal`: an asyncio.Event,
or anything with `is_set()`, e.g. a view of a training framework's abort flag) is read before each
node and after each batch of foreach items: the rollout stops at the next node boundary.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engines.base import EngineError, Generation
from ..plan import Plan
from ..spec.model import ABORT, END, POLICY
from .chat import NotAppendOnlyError, ThreadStateError
from .deadline import within
from .environment import environment_of, open_environment
from .finish import finish_samples, usage
from .foreach import foreach_items
from .handlers import HANDLERS
from .handlers.llm import strip_stop
from .ledger import CallRecord, LedgerError, TrainingSample
from .outcome import reward_scalar
from .renderers import ModelRenderers
from .rollout import AbortSignal, RolloutFault, RolloutInput, RolloutState, merge_pending
from .scope import NodeResult, Renderer, RenderError, merge_state
from .scoring import node_reward, rollout_reward
from .services import Endpoints, RewardScorer, ToolRunner, UnknownModel
from .trained_thread import TrainedThread
from .userfns import user_callable
from .values import excerpt as _excerpt
from .values import is_message as _is_message
from .values import lone_surrogate as _lone_surrogate

__all__ = ["Executor", "RolloutFault", "RolloutInput", "RolloutResult", "usage"]

HARD_MAX_STEPS = 100_000  # a last-resort bound; checked graphs are bounded long before
FAULTS = (EngineError, RenderError, UnknownModel, NotAppendOnlyError, LedgerError)


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
    aborted_by: str | None = None  # an aborted rollout: "engine" (a call came back aborted), "caller", "graph"


class Executor:
    def __init__(
        self,
        plan: Plan,
        endpoints: Endpoints,
        *,
        tools: ToolRunner,
        rewards: RewardScorer,
        sampling: Mapping[str, Any] | None = None,
        clock=time.monotonic,
        max_context_tokens: int | None = None,
    ):
        self.plan = plan
        self.endpoints = endpoints
        self.tools = tools
        self.rewards = rewards
        self.sampling = dict(sampling or {})
        self.params_cache: dict[Any, dict[str, Any]] = {}  # handlers.llm.sampling_params
        self.renderers = ModelRenderers(plan, endpoints)
        self.render = Renderer(plan, count_tokens=lambda text, model: len(self.renderers.for_model(model).encode(text)))
        self.clock = clock
        # a training framework's context bound (slime's --rollout-max-context-len): every call whose
        # tokens go into a training sample keeps prompt + output within it (llm handler)
        self.max_context_tokens = max_context_tokens
        self._children: dict[str, Executor] = {}  # sub-graph executors, by graph node id
        self._static: dict[str, str | None] = {}  # node id -> its handler's fixed next node, or None (_static_next)
        self.handlers = HANDLERS  # what a fork runs its branches with
        # the tool runner's optional `warm_up` (ToolRunner), called as each rollout starts with the
        # tools this graph calls: e.g. the python tool's sandboxes start while the first LLM call is out
        self._tools_used = _tools_of(plan)
        self._warm_up = getattr(tools, "warm_up", None) if self._tools_used else None

    # ------------------------------------------------------------------ public
    async def close(self) -> None:
        """Release what the tools hold open (HTTP sessions); the endpoints are their owner's to close."""
        close = getattr(self.tools, "close", None)
        if close is not None:
            await close()

    async def run(self, inp: RolloutInput, *, abort: AbortSignal | None = None) -> RolloutResult:
        if self._warm_up is not None:
            self._warm_up(self._tools_used)
        t0 = self.clock()
        r = RolloutState(inp=inp, ns={}, state={}, t0=t0)
        try:
            return await self._run(r, t0, abort)
        finally:  # after the reward, also when cancelled (slime's abort): sessions and environments
            await r.resources.close()  # never outlive the rollout

    async def _run(self, r: RolloutState, t0: float, abort: AbortSignal | None) -> RolloutResult:
        inp = r.inp
        timeout = self.plan.limits.timeout_s
        try:
            await within(self._execute(r, abort), timeout)
        except asyncio.TimeoutError:
            r.status, r.error = "failed", f"rollout timed out after {timeout:g} s"
        except RolloutFault as exc:
            r.status, r.error = exc.status, str(exc)
        except FAULTS as exc:
            r.status, r.error = "failed", f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            r.status, r.error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        reward = None
        if r.status in ("completed", "truncated") and self.plan.reward is not None:
            try:
                reward = await self._reward(r)
                if reward is None:
                    raise TypeError(f"{self.plan.reward.fn} returned None (a float or a dict is expected)")
                reward_scalar(reward, self.plan.reward.key)  # a value credit cannot be split from fails here
            except Exception as exc:  # user reward code may raise anything: it fails this rollout only
                reward = None
                why = f" (the rollout had ended {r.status}: {r.error})" if r.error else ""
                r.status, r.error = "failed", f"reward: {type(exc).__name__}: {exc}{why}"
        samples = self._finish_samples(r, reward)
        return RolloutResult(
            inp.rollout_id,
            inp.group,
            r.status,
            reward,
            samples,
            tuple(r.path),
            tuple(r.calls),
            r.error,
            dict(r.state),
            self.clock() - t0,
            r.engine_s,
            r.aborted_by if r.status == "aborted" else None,
        )

    # ------------------------------------------------------------------ graph walk
    def _init(self, r: RolloutState) -> None:
        row = dict(r.inp.row)
        row.setdefault("metadata", {})
        base = {
            "prompt": row.get("prompt"),
            "label": row.get("label"),
            "metadata": row.get("metadata") or {},
            "row": row,
        }
        inputs: dict[str, Any] = {}
        for name, decl in self.plan.inputs.items():
            value = self.render.expr_or_none(decl.from_, base)  # a failing lookup: missing, as None
            if value is None:
                if decl.required and decl.default is None:
                    raise RolloutFault(
                        f"{self.plan.span('inputs', name)}: input '{name}' ({decl.from_}) is missing from the data row"
                    )
                value = decl.default
            inputs[name] = value
        r.enter(self.plan, row, inputs)

    async def _execute(self, r: RolloutState, abort: AbortSignal | None) -> None:
        self._init(r)
        r.abort = abort
        if self.plan.environment is not None:
            decl = self.plan.environment
            args = self.render.value(("environment", "args"), decl.args, self._ctx(r, 0))
            r.ns["env"] = await open_environment(self.plan, self.user_callable(decl.class_), args, r.resources)
        node_id = await self.walk(r)
        if node_id == ABORT:
            r.status, r.error, r.aborted_by = "aborted", "the graph routed to abort", "graph"
        elif node_id is not None and r.last_finish == "length":
            r.status = "truncated"

    async def walk(self, r: RolloutState) -> str | None:
        """Run nodes from the start to end / abort (returned), or None when the rollout stopped early
        (aborted, truncated, out of steps). A sub-graph's run is a walk of its own plan."""
        node_id = self.plan.start
        passed = 0  # limited nodes passed since the last node ran
        while node_id not in (END, ABORT):
            if r.abort is not None and r.abort.is_set():
                r.status, r.error, r.aborted_by = "aborted", "aborted by the caller", "caller"
                return None
            if self._out_of_steps(r):
                return None
            node = self.plan.nodes[node_id]
            if self._limited(r, node_id, node):
                passed += 1
                if passed > len(self.plan.nodes):  # a ring of on_limit edges (the checker's E104)
                    r.status, r.error = "truncated", f"on_limit edges loop at '{node_id}' without running a node"
                    return None
                node_id = node.on_limit or END
                continue
            passed = 0
            node_id = await self._step(r, node_id, node, r.abort)
            if r.status in ("aborted", "truncated"):
                return None
        return node_id

    def subgraph(self, nid: str) -> Executor:
        """The executor of `graph` node `nid`'s child plan: the same engines, tools and rewards."""
        child = self._children.get(nid)
        if child is None:
            plan = (self.plan.subgraphs or {})[nid]
            child = self._children[nid] = Executor(
                plan, self.endpoints, tools=self.tools, rewards=self.rewards, sampling=self.sampling,
                clock=self.clock, max_context_tokens=self.max_context_tokens,
            )  # fmt: skip
        return child

    def _out_of_steps(self, r: RolloutState) -> bool:
        """limits.max_steps counts node visits (each foreach item is one); reaching it truncates."""
        max_steps = self.plan.limits.max_steps or HARD_MAX_STEPS
        if r.steps >= max_steps:
            r.status, r.error = "truncated", f"limits.max_steps ({max_steps}) reached"
            return True
        return False

    def _limited(self, r: RolloutState, nid: str, node: Any) -> bool:
        if node.max_visits is not None and r.visits.get(nid, 0) >= node.max_visits:
            return True
        return node.token_budget is not None and r.policy_tokens >= node.token_budget

    async def _step(self, r: RolloutState, nid: str, node: Any, abort: AbortSignal | None) -> str:
        """Run a node: once, or once per foreach item (`parallel` items at a time); each item is a visit."""
        handler = HANDLERS[node.kind]
        items: list[Any] = [None]
        if node.foreach is not None:
            items = await foreach_items(self, self._ctx(r, 0), nid, node)
        width = node.foreach.parallel if node.foreach is not None else 1
        output: NodeResult | None = None
        i = 0
        while i < len(items):
            batch: list[tuple[int, dict[str, Any]]] = []  # (visit, ctx) of the items that run together
            while i < len(items) and len(batch) < width:
                # max_visits stops the items early, max_steps truncates the rollout
                if i and (
                    self._out_of_steps(r) or (node.max_visits is not None and r.visits.get(nid, 0) >= node.max_visits)
                ):
                    i = len(items)
                    break
                r.steps += 1
                r.visits[nid] = r.visits.get(nid, 0) + 1
                visit = r.visits[nid]
                r.path.append((nid, visit))
                ctx = self._ctx(r, visit)  # a batch's items all see the state as it was before the batch
                if node.foreach is not None:
                    ctx[node.foreach.as_] = items[i]
                    ctx["loop"] = {"index": i, "count": len(items), "first": i == 0, "last": i == len(items) - 1}
                batch.append((visit, ctx))
                i += 1
            if not batch:
                break
            results = await self._run_items(r, nid, node, handler, batch)
            for (visit, ctx), res in zip(batch, results):
                if isinstance(res, BaseException):
                    if not isinstance(res, FAULTS) or _field(node, "on_error") is None:
                        raise res
                    r.ns[nid] = NodeResult(text="", ok=False, error=f"{type(res).__name__}: {res}")
                    return node.on_error
                if r.status == "aborted":
                    return END
                output = res
                if _field(node, "reward") is not None:
                    await self._node_reward(r, nid, node, visit, ctx, res)
                self._record(r, nid, node, visit, ctx, res)
            if abort is not None and abort.is_set():
                break
        target = self._static_next(nid, node, handler)
        if target is not None:  # an unconditional `next:` (or none): no routing context to build
            return target
        ctx = self._ctx(r, r.visits.get(nid, 0))
        ctx["output"] = output if output is not None else NodeResult()
        return handler.route(self, nid, node, ctx)

    def _static_next(self, nid: str, node: Any, handler: Any) -> str | None:
        """Where `nid` always goes next (`handler.fixed`: a `next:` whose first branch has no `when`,
        END without one), or None when routing depends on the visit (a condition, a switch); found
        once per node."""
        try:
            return self._static[nid]
        except KeyError:
            pass
        target = self._static[nid] = handler.fixed(node)
        return target

    async def _run_items(
        self, r: RolloutState, nid: str, node: Any, handler: Any, batch: list[tuple[int, dict[str, Any]]]
    ) -> list[Any]:
        """The handler once per (visit, ctx), concurrently; results (or exceptions) in item order, and
        the samples they made in item order too (not in the order the calls happened to finish)."""
        try:
            if len(batch) == 1:
                visit, ctx = batch[0]
                try:
                    return [await handler.run(self, r, nid, node, visit, ctx)]
                except FAULTS as exc:
                    return [exc]
            first = len(r.samples)
            results = await asyncio.gather(
                *(handler.run(self, r, nid, node, visit, ctx) for visit, ctx in batch), return_exceptions=True
            )
            made = r.samples[first:]
            made.sort(key=lambda s: s.spans[0].visit if isinstance(s, TrainingSample) and s.spans else 0)
            r.samples[first:] = made
            return list(results)
        finally:  # sub-graph runs join the rollout in item order, whatever order they finished in
            merge_pending(r, [(nid, visit) for visit, _ in batch])

    def _record(
        self, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any], output: NodeResult
    ) -> None:
        """A visit's result: the node's name and `output` bound, its state writes, its append_to."""
        ctx["output"] = output
        ctx[nid] = output
        r.ns[nid] = output
        if not node.update and node.append_to is None:
            return
        ctx["thread_tokens"] = {k: len(t.chat) for k, t in r.threads.items()}  # as the visit left them
        self._updates(r, nid, node, ctx)
        if node.append_to is not None:
            where = ("nodes", nid, "append_to", "content")
            content = self.plain_text(where, self.render.text(where, node.append_to.content, ctx))
            thread = self.thread(r, node.append_to.thread)
            if node.append_to.in_response:
                try:
                    thread.continue_response(str(content), owner=(nid, visit))
                except ThreadStateError as exc:
                    raise RenderError(self.plan.span("nodes", nid, "append_to"), str(exc)) from None
            else:
                thread.add_messages([{"role": node.append_to.role, "content": content}], owner=(nid, visit))

    def _ctx(self, r: RolloutState, visit: int) -> dict[str, Any]:
        ctx = dict(r.ns)
        ctx.update(r.state)
        ctx["visit"] = visit
        threads = r.threads
        ctx["threads"] = {k: t.chat.message_list() for k, t in threads.items()} if threads else {}
        ctx["thread_tokens"] = {k: len(t.chat) for k, t in threads.items()} if threads else {}
        return ctx

    def _updates(self, r: RolloutState, nid: str, node: Any, ctx: dict[str, Any]) -> None:
        for name, tmpl in node.update.items():
            value = self.render.value(("nodes", nid, "update", name), tmpl, ctx)
            try:
                merge_state(r.state, name, self.plan.state[name], value)
            except (TypeError, KeyError) as exc:
                raise RenderError(self.plan.span("nodes", nid, "update", name), str(exc)) from None
            ctx[name] = r.state[name]

    # ------------------------------------------------------------------ services of the node handlers
    def thread(self, r: RolloutState, name: str) -> TrainedThread:
        """The rollout's thread `name`, opened (its prompt rendered) on first use."""
        th = r.threads.get(name)
        if th is None:
            decl = self.plan.threads[name]
            ctx = self._ctx(r, 0)
            msgs = self.messages(("threads", name, "prompt"), decl.prompt, ctx)
            tools = self.render.value(("threads", name, "tools"), decl.tools, ctx) if decl.tools else None
            self.plain_text(("threads", name, "tools"), tools)
            chat = self.renderers.for_thread(name).thread(msgs, tools=tools)
            th = r.threads[name] = TrainedThread(
                chat,
                sampled=name in self.plan.training.threads,
                rollout_id=r.inp.rollout_id,
                on_sample=r.samples.append,
            )
        return th

    def user_callable(self, ref: str):
        return user_callable(self.plan, ref)

    def messages(self, path: tuple, prompt: Any, ctx: dict[str, Any]) -> list[dict[str, Any]]:
        """A prompt's rendered chat messages; data that cannot be a chat message (a `messages:` value
        that is not text or {role, content} mappings, text that is not valid Unicode) is a located
        RenderError, so a bad data row fails its rollout with a message, not an internal error."""
        out: list[dict[str, Any]] = []
        for i, m in enumerate(prompt or ()):
            role = m.role
            value = self.render.value(path + (i, role), getattr(m, role), ctx)  # m.content, role found once
            if role != "messages":
                out.append({"role": role, "content": value if isinstance(value, str) else str(value)})
            elif isinstance(value, str):
                out.append({"role": "user", "content": value})
            elif isinstance(value, list) and all(_is_message(x) for x in value):
                out.extend(dict(x) for x in value)
            else:
                bad = next((x for x in value if not _is_message(x)), None) if isinstance(value, list) else value
                raise RenderError(
                    self.plan.span(*path, i),
                    "messages: must give a string or a list of "
                    "{role, content} mappings (role a string, content a string, a list or null); "
                    f"got {_excerpt(bad)}",
                )
            self.plain_text(path + (i,), out[-1] if role != "messages" or isinstance(value, str) else value)
        return out

    def plain_text(self, path: tuple, value: Any) -> Any:
        """`value` unchanged, or a located RenderError when a string in it is not valid Unicode (a lone
        surrogate, e.g. from a JSON escape like \\ud800 in a data row): no tokenizer can encode it."""
        bad = _lone_surrogate(value)
        if bad is not None:
            raise RenderError(
                self.plan.span(*path),
                f"text holds a lone surrogate (U+{ord(bad):04X}): not valid Unicode, cannot be tokenised",
            )
        return value

    async def generate(
        self, r: RolloutState, model: str, ids: tuple[int, ...], params: dict[str, Any], nid: str, visit: int
    ) -> tuple[Generation, CallRecord]:
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
        call = CallRecord(
            node=nid,
            visit=visit,
            endpoint=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=n_out,
            cached_tokens=gen.cached_tokens,
            latency_s=round(latency, 6),
            finish_reason=gen.finish_reason.type,
            cost=cost,
            start_s=start_s,
            weight_version=_str_or_none(gen.meta.get("weight_version")),
            spec_accept_token_num=gen.meta.get("spec_accept_token_num"),
            spec_draft_token_num=gen.meta.get("spec_draft_token_num"),
            spec_verify_ct=gen.meta.get("spec_verify_ct"),
        )
        r.calls.append(call)
        if model == POLICY:
            r.policy_tokens += len(ids) + n_out
        return gen, call

    # ------------------------------------------------------------------ rewards, samples
    async def _judge(self, r: RolloutState, model: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        """A judge call for the reward: same endpoint limits and call accounting as any llm call."""
        if model not in self.plan.models:
            raise UnknownModel(f"{self.plan.span('reward', 'judge')}: judge model '{model}' is not declared")
        renderer = self.renderers.for_model(model)
        ids = renderer.start(messages)
        params = {
            **self.sampling,
            "max_new_tokens": max_tokens,
            "temperature": 0.0,
            "stop_token_ids": sorted(renderer.stop_token_ids),
            "skip_special_tokens": False,
        }
        gen, _ = await self.generate(r, model, ids, params, "reward", 1)
        return strip_stop(renderer, gen.output_ids)

    async def _node_reward(
        self, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any], output: NodeResult
    ) -> None:
        """A visit's own reward: kept for its sample (`finish`) and bound as `output.reward`."""
        live = environment_of(r.resources)
        value = await node_reward(self.plan, self.render, self.rewards, nid, node.reward, ctx, output, live)
        r.node_rewards[(nid, visit)] = value
        output["reward"] = value

    async def _reward(self, r: RolloutState) -> float | dict[str, Any] | None:
        ctx = self._ctx(r, 0)
        ctx["usage"] = usage(r.calls)
        judge = functools.partial(self._judge, r)
        return await rollout_reward(self.plan, self.render, self.rewards, ctx, judge, environment_of(r.resources))

    def _finish_samples(self, r: RolloutState, reward: Any) -> tuple[TrainingSample, ...]:
        merge_pending(r, sorted(r.pending))  # runs cut off by a timeout keep their samples too
        return finish_samples(r.samples, reward, self.plan.reward, r.status, r.inp.rollout_id, r.node_rewards)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _tools_of(plan: Plan) -> frozenset[str]:
    """The tools a plan's tool nodes call, its sub-graphs' included."""
    names = {node.tool for node in plan.nodes.values() if node.kind == "tool"}
    for child in (plan.subgraphs or {}).values():
        names |= _tools_of(child)
    return frozenset(names)


def _field(node: Any, name: str) -> Any:
    """`node.name`, None for a node kind without that field (no AttributeError raised and caught:
    through pydantic's __getattr__ that costs 2.2 us on a switch node against 0.1 us here, `timeit`,
    and it ran on every visit)."""
    values = getattr(node, "__dict__", None)  # a pydantic model keeps its field values there
    return values.get(name) if values is not None else getattr(node, name, None)
