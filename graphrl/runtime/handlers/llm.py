"""LLM nodes: render -> generate -> record.

render: a fresh prompt (`prompt:`), or the node's messages appended to its thread and the delta
rendered (`TrainedThread.prepare`); generate: one engine call with the node's sampling parameters;
record: the engine's ids verbatim into the call's own sample (`sample: call`) and/or the thread
(and its sample), then the parsed result.
"""

from __future__ import annotations

from typing import Any

from ...engines.base import EngineError
from ...spec.common import POLICY
from ..chat import ContextBudgetError, NotAppendOnlyError
from ..chat_template import CompletionModeError
from ..ledger import SampleBuilder
from ..parsers import parse_output
from ..rollout import RolloutFault, RolloutState, StepServices
from ..scope import NodeResult, RenderError
from ..services import UnknownModel
from .base import Handler
from .thread_summary import summarize_thread


def sampling_params(
    ex: StepServices, node: Any, model: str, stop_token_ids: frozenset[int] | set[int]
) -> dict[str, Any]:
    """The run's base sampling parameters, then the model's and the node's; stops and lengths are the
    node's. A new dict each call (callers set per-call keys in it); its contents are made once per
    (node, model, stop ids) and kept in `ex.params_cache` (the plan and `ex.sampling` are fixed)."""
    key = (id(node), model, frozenset(stop_token_ids))
    base = ex.params_cache.get(key)
    if base is None:
        base = ex.params_cache[key] = _sampling_params(ex, node, model, stop_token_ids)
    return dict(base)


def _sampling_params(
    ex: StepServices, node: Any, model: str, stop_token_ids: frozenset[int] | set[int]
) -> dict[str, Any]:
    p = dict(ex.sampling)
    decl = ex.plan.models.get(model)
    for key in ("temperature", "top_p", "top_k"):
        v = getattr(node, key)
        if v is None and decl is not None:
            v = getattr(decl, key)
        if v is not None:
            p[key] = v
    p["max_new_tokens"] = node.max_tokens
    if node.stop:
        p["stop"] = list(node.stop)
    if node.constrain is not None:
        p.update(node.constrain.sampling_params())
    p["stop_token_ids"] = sorted(set(p.get("stop_token_ids") or ()) | set(stop_token_ids))
    p.setdefault("skip_special_tokens", False)
    p.setdefault("no_stop_trim", True)
    p.setdefault("spaces_between_special_tokens", False)
    return p


def _bounded(ex: StepServices, nid: str, messages: list[dict[str, Any]], bound: int) -> list[dict[str, Any]]:
    """The messages, unless their text is so long that no tokenisation fits the prompt bound: refused
    before the tokenizer sees it (tokenising tens of MB takes gigabytes)."""
    chars = sum(len(m["content"]) for m in messages if isinstance(m.get("content"), str))
    if chars > 16 * bound:
        raise RenderError(
            ex.plan.span("nodes", nid, "prompt"),
            f"the prompt of '{nid}' has {chars} characters, far "
            f"over limits.max_prompt_tokens ({bound}): refused before tokenising",
        )
    return messages


def _context_bound(
    ex: StepServices, nid: str, node: Any, model: str, ids: tuple[int, ...], params: dict[str, Any], thread: Any
) -> None:
    """A bounded context (slime's --rollout-max-context-len): a call whose tokens go into a training
    sample gets at most the room left (max_new_tokens clamped); with no room left the rollout ends
    truncated before the call, its thread sample cut back to the bound (only the masked text just
    rendered can be past it)."""
    bound = ex.max_context_tokens
    if bound is None or (model != POLICY and node.sample_mode == "none"):
        return
    room = bound - len(ids)
    if room < 1:
        if thread is not None and thread.sample is not None:
            thread.sample.cut_masked_tail(bound)
        raise RolloutFault(
            f"'{nid}': the context has {len(ids)} tokens, the context bound is {bound} "
            "(--rollout-max-context-len): the rollout ends truncated before this call",
            status="truncated",
        )
    params["max_new_tokens"] = min(int(params["max_new_tokens"]), room)


def strip_stop(renderer: Any, ids: tuple[int, ...]) -> str:
    if ids and ids[-1] in renderer.stop_token_ids:
        ids = ids[:-1]
    return renderer.decode(ids)


async def run_llm(
    ex: StepServices, r: RolloutState, nid: str, node: Any, visit: int, ctx: dict[str, Any]
) -> NodeResult:
    # render
    model = ex.render.text(("nodes", nid, "llm"), node.llm, ctx).strip() if node.dynamic_model else node.llm
    if model not in ex.plan.models:
        raise UnknownModel(f"{ex.plan.span('nodes', nid, 'llm')}: model '{model}' is not declared in the graph")
    renderer = ex.renderers.for_call(model, node)
    bound = ex.plan.limits.max_prompt_tokens
    thread = None
    try:
        if node.thread:
            thread = ex.thread(r, node.thread)
            if thread.chat.renderer.completion != renderer.completion:
                modes = {True: "completion mode", False: "a chat template"}
                raise RenderError(
                    ex.plan.span("nodes", nid, "llm"),
                    f"'{nid}' calls '{model}' with {modes[renderer.completion]}, but thread "
                    f"'{node.thread}' is rendered with {modes[thread.chat.renderer.completion]}: "
                    "a thread cannot mix completion mode and chat turns",
                )
            renderer = thread.chat.renderer
            if node.prompt:
                msgs = ex.messages(("nodes", nid, "prompt"), node.prompt, ctx)
                thread.add_messages(_bounded(ex, nid, msgs, bound))
            decl = ex.plan.threads[node.thread]
            summarize = decl.on_overflow == "summarize"
            budget = None if summarize else decl.max_tokens  # truncation: done by the thread itself
            overflow = decl.max_tokens if summarize else None  # a summary: an LLM call, made here
            try:
                ids = thread.prepare(decl.on_drift, node=nid, visit=visit, budget=budget, overflow=overflow)
                if overflow is not None and len(ids) > overflow:
                    ids = await summarize_thread(ex, r, node.thread, thread, nid, visit, ctx)
            except ContextBudgetError as exc:
                raise RolloutFault(
                    f"{ex.plan.span('threads', node.thread, 'max_tokens')}: thread '{node.thread}' at '{nid}' "
                    f"(visit {visit}): {exc}",
                    status="truncated",
                ) from None
            except NotAppendOnlyError as exc:
                raise RenderError(
                    ex.plan.span("threads", node.thread, "on_drift") or ex.plan.span("threads", node.thread),
                    f"thread '{node.thread}' at '{nid}' (visit {visit}): {exc}; on_drift: fail ends the "
                    "rollout here (on_drift: new_sample would start a new training sample instead)",
                ) from None
        else:
            tools = None
            if node.tools is not None:
                tools = ex.render.value(("nodes", nid, "tools"), node.tools, ctx)
                ex.plain_text(("nodes", nid, "tools"), tools)
                if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
                    raise RenderError(
                        ex.plan.span("nodes", nid, "tools"),
                        f"tools of '{nid}' must be a list of tool JSON schemas (mappings), got {type(tools).__name__}",
                    )
            msgs = _bounded(ex, nid, ex.messages(("nodes", nid, "prompt"), node.prompt, ctx), bound)
            ids = renderer.start(msgs, tools=tools)
    except CompletionModeError as exc:
        raise RenderError(ex.plan.span("nodes", nid), f"'{nid}': {exc}") from None
    if len(ids) > bound:
        raise RenderError(
            ex.plan.span("nodes", nid, "prompt"),
            f"the prompt of '{nid}' has {len(ids)} tokens, over limits.max_prompt_tokens ({bound})",
        )
    params = sampling_params(ex, node, model, renderer.stop_token_ids)
    _context_bound(ex, nid, node, model, ids, params, thread)
    # generate
    gen, call = await ex.generate(r, model, ids, params, nid, visit)
    vocab = renderer.vocab_size
    if vocab is not None and gen.output_ids and (max(gen.output_ids) >= vocab or min(gen.output_ids) < 0):
        bad = next(i for i in gen.output_ids if i >= vocab or i < 0)
        raise EngineError(
            f"'{nid}': the engine returned token id {bad}, outside the tokenizer's vocabulary "
            f"of {vocab}: nothing of this call is trained"
        )
    if gen.finish_reason.type == "abort" and not gen.output_ids:  # aborted before its first token
        r.status, r.error = "aborted", f"engine aborted the call of '{nid}' before it generated a token"
        r.aborted_by = "engine"
        r.last_finish = "abort"
        return NodeResult(text="", ok=False, model=model, finish_reason="abort")
    if model == POLICY or node.sample_mode != "none":
        r.last_finish = gen.finish_reason.type
    # record
    mask = 1 if node.trained else 0
    if node.sample_mode == "call":
        b = SampleBuilder(ids, rollout_id=r.inp.rollout_id)
        b.append(gen.output_ids, mask=mask, logprobs=gen.logprobs, node=nid, visit=visit, kind="generated")
        b.record_call(call)
        r.samples.append(b.freeze())
    if thread is not None:
        text = thread.record_output(
            gen.output_ids,
            gen.logprobs,
            gen.finish_reason,
            mask=mask if node.sample_mode == "thread" else 0,
            node=nid,
            visit=visit,
            call=call,
        )
    else:
        text = strip_stop(renderer, gen.output_ids)
    if gen.finish_reason.type == "abort":
        r.status, r.error, r.aborted_by = "aborted", f"engine aborted the call of '{nid}'", "engine"
    parsed = parse_output(node.parse, text, ex.user_callable)
    result = NodeResult(parsed.fields)
    result.update(text=text, ok=parsed.ok, model=model, finish_reason=gen.finish_reason.type)
    if parsed.error:
        result["parse_error"] = parsed.error
    return result


HANDLER = Handler(run=run_llm)
