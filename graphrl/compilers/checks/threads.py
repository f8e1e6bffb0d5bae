"""Thread policy checks: what a thread does past its token budget (`on_overflow`, `summarize:`).

Input: `Graph` + `Flow`. Output: E320 (on_overflow: summarize without a summarize: section or
without max_tokens:, or a summarize: section that on_overflow: truncate would never use), E301 (the
summary's model is not declared), E321 (a trained summary call on a frozen model: only the policy's
own tokens are trained).
"""

from __future__ import annotations

from collections.abc import Iterator

from ...spec.diagnostics import Diagnostic, did_you_mean
from ...spec.load import Graph
from ...spec.model import POLICY
from ..flow import Flow


def thread_policies(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    models = set(g.spec.models) | {POLICY}
    for tid, th in g.spec.threads.items():
        summ = th.summarize
        if th.on_overflow == "summarize":
            if summ is None:
                yield Diagnostic(
                    "E320",
                    f"thread '{tid}' has on_overflow: summarize but no summarize: section",
                    g.span("threads", tid, "on_overflow"),
                    "add summarize: {llm: policy, prompt: [...]} (the summary call), or on_overflow: truncate",
                )
            if th.max_tokens is None:
                yield Diagnostic(
                    "E320",
                    f"thread '{tid}' has on_overflow: summarize but no max_tokens: budget to overflow",
                    g.span("threads", tid, "on_overflow"),
                    "add max_tokens: N (the thread's token budget)",
                )
        elif summ is not None:
            yield Diagnostic(
                "E320",
                f"thread '{tid}' has a summarize: section but on_overflow is truncate: it would never be used",
                g.span("threads", tid, "summarize", key=True),
                "add on_overflow: summarize (with max_tokens:), or remove summarize:",
            )
        if summ is None:
            continue
        if summ.llm not in models:
            yield Diagnostic(
                "E301",
                f"summary model '{summ.llm}' is not declared",
                g.span("threads", tid, "summarize", "llm"),
                did_you_mean(summ.llm, models) or "declare it under models: with a url: or serve:",
            )
        elif summ.train and summ.llm != POLICY:
            yield Diagnostic(
                "E321",
                f"thread '{tid}': the summary call runs on frozen model '{summ.llm}' and cannot be trained",
                g.span("threads", tid, "summarize", "train"),
                "set train: false, or let the policy write the summary (llm: policy)",
            )
