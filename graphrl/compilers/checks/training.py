"""Training checks: what gets trained, worst-case context use.

Input: `Graph` + `Flow`. Output: diagnostics E401, W402, W404, W405 (E403, fan-out against slime's settings, is the slime
target's check), and the helper
`sample_layout(g, flow)` that lowering reuses (which nodes/threads make training samples, and
whether one rollout can yield several samples: "fan-out", docs/architecture.md, slime contract §1).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...spec.diagnostics import Diagnostic
from ...spec.load import Graph
from ...spec.model import POLICY, LLMNode
from ..flow import Flow
from ..layout import DEFAULT_MAX_TOKENS, SampleLayout, sample_layout, visit_bound  # noqa: F401 - re-exported

CHARS_PER_TOKEN = 3  # a conservative estimate for template text (templates are not tokenised here)


def trained_frozen(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    for nid, n in g.nodes.items():
        if isinstance(n, LLMNode) and n.trained and not n.on_policy:
            yield Diagnostic(
                "E401",
                f"node '{nid}' is trained but runs on '{n.llm}', a frozen model",
                g.span("nodes", nid, "train") if n.train is not None else g.span("nodes", nid, "llm"),
                "only the policy is trained: use llm: policy, or train: false",
            )


def no_trained(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    trains = any(isinstance(n, LLMNode) and n.trained and n.sample_mode != "none" for n in g.nodes.values())
    if not trains and not any(n.kind == "graph" for n in g.nodes.values()):  # a sub-graph's calls may train
        yield Diagnostic(
            "W402",
            "no node is trained: rollouts of this graph give no training signal",
            g.span("nodes", key=True),
            "mark a policy node train: true (the default on policy)",
        )
    for nid, n in g.nodes.items():
        if isinstance(n, LLMNode) and n.on_policy and n.sample_mode != "none" and not n.trained:
            yield Diagnostic(
                "W405",
                f"policy node '{nid}' enters a training sample but none of its tokens are trained",
                g.span("nodes", nid, key=True),
                "set sample: none if it should stay out of training",
            )


def context_overflow(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    policy = g.spec.models.get(POLICY)
    limit = policy.context_length if policy else None
    if limit is None:
        return
    default_max = g.spec.limits.max_tokens or DEFAULT_MAX_TOKENS
    thread_total: dict[str, int] = {}
    for nid, n in g.nodes.items():
        if not (isinstance(n, LLMNode) and n.on_policy):
            continue
        prompt = sum(len(m.content) for m in n.prompt or ()) // CHARS_PER_TOKEN
        if n.foreach and n.foreach.chunk_tokens:
            prompt += n.foreach.chunk_tokens
        per_call = prompt + (n.max_tokens or default_max)
        if n.thread and n.thread in g.spec.threads:
            bound = visit_bound(g, flow, nid)
            opening = sum(len(m.content) for m in g.spec.threads[n.thread].prompt) // CHARS_PER_TOKEN
            thread_total.setdefault(n.thread, opening)
            thread_total[n.thread] += per_call * (bound or 1)
        elif per_call > limit:
            yield Diagnostic(
                "W404",
                f"a call of '{nid}' can need ~{per_call} tokens, over the policy's context_length {limit}",
                g.span("nodes", nid, key=True),
                "lower max_tokens or chunk_tokens, or raise context_length",
            )
    for t, total in sorted(thread_total.items()):
        if total > limit:
            yield Diagnostic(
                "W404",
                f"thread '{t}' can grow to ~{total} tokens, over the policy's context_length {limit}",
                g.span("threads", t, key=True),
                "lower max_visits or max_tokens of its nodes, or raise context_length",
            )
