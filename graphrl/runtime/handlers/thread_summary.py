"""A thread over its token budget, summarised (`threads.NAME.on_overflow: summarize`).

Input: a thread whose prepared ids (what its next call would send) exceed `max_tokens`, its
`summarize:` declaration, the calling node's render context. Output: the thread restarted from
its opening messages, one summary message and its newest `keep_last` messages; the ids the
calling node then sends.

The summary is one LLM call (`summarize.llm`, a frozen model or the policy) whose prompt sees the
replaced messages as `dropped`; its text becomes the summary message through `summarize.content`.
Sample boundary: the thread's current sample ends with its last output, as generated; with
`train: true` (policy only) the summary call is a training sample of its own (its prompt, then its
output with mask 1), otherwise it trains nothing; a new thread sample starts whose prompt is the
re-rendered thread (all mask 0), and its ids are exactly what the engine is sent. When nothing can
be replaced (only the opening and `keep_last` messages) or the summarised thread still does not fit,
the rollout ends truncated (ContextBudgetError, located by the caller).
"""

from __future__ import annotations

from typing import Any

from ...spec.common import POLICY
from ..chat import ContextBudgetError
from ..ledger import SampleBuilder
from ..rollout import RolloutFault, RolloutState, StepServices
from ..trained_thread import TrainedThread


def _params(ex: StepServices, model: str, max_new: int, stop_ids: frozenset[int]) -> dict[str, Any]:
    """The run's base sampling parameters, then the model's; the summary's own length."""
    p = dict(ex.sampling)
    decl = ex.plan.models.get(model)
    for key in ("temperature", "top_p", "top_k"):
        v = getattr(decl, key, None) if decl is not None else None
        if v is not None:
            p[key] = v
    p["max_new_tokens"] = max_new
    p["stop_token_ids"] = sorted(set(p.get("stop_token_ids") or ()) | set(stop_ids))
    p.setdefault("skip_special_tokens", False)
    p.setdefault("no_stop_trim", True)
    p.setdefault("spaces_between_special_tokens", False)
    return p


async def summarize_thread(
    ex: StepServices, r: RolloutState, tid: str, thread: TrainedThread, nid: str, visit: int, ctx: dict[str, Any]
) -> tuple[int, ...]:
    decl = ex.plan.threads[tid]
    summ = decl.summarize
    budget = decl.max_tokens
    assert summ is not None and budget is not None  # the checker (E320) guarantees both
    messages = list(thread.chat.messages)
    opening = thread.chat.opening
    keep = min(summ.keep_last, len(messages) - opening)
    dropped, kept = messages[opening : len(messages) - keep], messages[len(messages) - keep :]
    if not dropped:
        kept_too = f" and the newest {keep} (summarize.keep_last)" if keep else ""
        raise ContextBudgetError(
            f"the thread needs {len(thread.chat)} tokens, over its {budget}-token budget, and holds only its "
            f"opening messages{kept_too}: nothing to summarise"
        )
    # the summary call
    model = summ.llm
    renderer = ex.renderers.for_model(model)
    sctx = {**ctx, "dropped": [{"role": m.get("role"), "content": m.get("content")} for m in dropped]}
    path = ("threads", tid, "summarize", "prompt")
    ids = renderer.start(ex.messages(path, summ.prompt, sctx))
    max_new = summ.max_tokens
    trained = summ.train and model == POLICY
    bound = ex.max_context_tokens
    if trained and bound is not None:
        if bound - len(ids) < 1:
            raise RolloutFault(
                f"{ex.plan.span(*path)}: the summary prompt of thread '{tid}' has {len(ids)} tokens, the context "
                f"bound is {bound} (--rollout-max-context-len): the rollout ends truncated",
                status="truncated",
            )
        max_new = min(max_new, bound - len(ids))
    params = _params(ex, model, max_new, renderer.stop_token_ids)
    gen, call = await ex.generate(r, model, ids, params, nid, visit)
    if gen.finish_reason.type == "abort":
        r.aborted_by = "engine"
        raise RolloutFault(f"engine aborted the summary call of thread '{tid}' at '{nid}'", status="aborted")
    if trained:
        b = SampleBuilder(ids, rollout_id=r.inp.rollout_id)
        b.append(gen.output_ids, mask=1, logprobs=gen.logprobs, node=nid, visit=visit, kind="generated")
        b.record_call(call)
        r.samples.append(b.freeze())
    out = gen.output_ids
    if out and out[-1] in renderer.stop_token_ids:
        out = out[:-1]
    summary = renderer.decode(out)
    where = ("threads", tid, "summarize", "content")
    content = ex.render.text(where, summ.content, {**ctx, "summary": summary})
    new = [*messages[:opening], {"role": summ.role, "content": ex.plain_text(where, content)}, *kept]
    note = f"summarised {len(dropped)} of {len(messages) - opening} messages after the opening into one"
    return thread.replace_history(new, note=note, budget=budget)
