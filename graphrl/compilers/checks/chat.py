"""Chat-template checks: model template files, completion mode, templates that rewrite history.

Input: `Graph` + `Flow`. Output: E201 (a model's `chat_template` file does not parse, located at
its line), E310 (completion mode mixed with chat turns in one thread, or tool schemas where no chat
template renders them), W406 (a thread that is re-rendered after its outputs, with a chat template
known at check time -- a model's `chat_template` file -- that rewrites earlier turns: each such turn
starts a new training sample, or fails the rollout with `on_drift: fail`).

The tokenizer's own template is known only at run time; the runtime's prefix check covers it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jinja2.exceptions import TemplateSyntaxError

from ...spec.chat_jinja import compile_template, history_rewrite
from ...spec.diagnostics import Diagnostic, Span
from ...spec.load import Graph
from ...spec.model import POLICY, LLMNode
from ..flow import Flow
from ..layout import rerendered_threads


def _completion(g: Graph, node: LLMNode) -> bool | None:
    """A node's mode: True completion, False chat, None unknown (a model chosen per call)."""
    if node.completion is not None:
        return node.completion
    if node.dynamic_model:
        return None
    decl = g.spec.models.get(node.llm)
    return bool(decl is not None and decl.completion)


def _thread_model(g: Graph, tid: str) -> str:
    models = {n.llm for n in g.nodes.values() if isinstance(n, LLMNode) and n.thread == tid and not n.dynamic_model}
    return next(iter(models)) if len(models) == 1 else POLICY


def _compiled(g: Graph, model: str) -> tuple[Any, Diagnostic | None]:
    src = g.templates.get(("models", model, "chat_template"))
    if src is None:
        return None, None
    try:
        return compile_template(src.text), None
    except TemplateSyntaxError as exc:
        return None, Diagnostic(
            "E201",
            f"chat template of model '{model}' does not parse: {exc.message}",
            Span(src.file, exc.lineno or 1, 1),
            "the file is a Hugging Face chat template (Jinja): messages, tools, add_generation_prompt",
        )
    except Exception as exc:  # e.g. an extension transformers refuses
        return None, Diagnostic(
            "E201", f"chat template of model '{model}' cannot be compiled: {exc}", Span(src.file, 1, 1)
        )


def chat_templates(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    compiled: dict[str, Any] = {}
    for name in g.spec.models:
        template, problem = _compiled(g, name)
        if problem is not None:
            yield problem
        elif template is not None:
            compiled[name] = template
    for tid, roles in sorted(rerendered_threads(g, flow).items()):
        model = _thread_model(g, tid)
        template = compiled.get(model)
        if template is None:
            continue
        decl = g.spec.models[model]
        found = history_rewrite(
            template,
            sorted(roles - {"messages"} | ({"user"} if "messages" in roles else set())),
            decl.chat_template_kwargs,
        )
        if found is None:
            continue
        role, held, now = found
        choice = g.spec.threads[tid].on_drift
        then = (
            "each such turn starts a new training sample from the re-rendered conversation (on_drift: new_sample)"
            if choice == "new_sample"
            else "the rollout fails at such a turn (on_drift: fail)"
        )
        yield Diagnostic(
            "W406",
            f"thread '{tid}' is re-rendered after its outputs with model '{model}''s chat template "
            f"({decl.chat_template}), which rewrites earlier turns: after an assistant output and a "
            f"'{role}' message the thread holds {held!r} where the template renders {now!r}; {then}",
            g.span("threads", tid, key=True),
            "use a template that keeps earlier turns as they were generated (or chat_template_kwargs that "
            "make it do so), keep observations in the response (append_to: {in_response: true}), or "
            "accept the sample boundary (docs/graph-language.md, Threads)",
        )


def completion_mode(g: Graph, flow: Flow) -> Iterator[Diagnostic]:
    """E310: one thread is either completion mode or chat; tool schemas need a chat template."""
    for tid, th in g.spec.threads.items():
        users = [(nid, n) for nid, n in g.nodes.items() if isinstance(n, LLMNode) and n.thread == tid]
        modes = [(nid, n, _completion(g, n)) for nid, n in users]
        known = [(nid, n, m) for nid, n, m in modes if m is not None]
        if known:
            first_id, _, first = known[0]
            for nid, n, m in known[1:]:
                if m != first:
                    yield Diagnostic(
                        "E310",
                        f"thread '{tid}' mixes completion mode and chat turns: '{first_id}' uses "
                        f"{_mode(first)}, '{nid}' uses {_mode(m)}",
                        g.span("nodes", nid, "completion") if n.completion is not None else g.span("nodes", nid, "llm"),
                        "a completion thread is plain text with no turn markers: use one mode for every node "
                        "of the thread (the model's completion:, or the node's completion:)",
                    )
                    break
            if th.tools is not None and any(m for _, _, m in known):
                yield Diagnostic(
                    "E310",
                    f"thread '{tid}' is in completion mode, which has no chat template to render tools",
                    g.span("threads", tid, "tools"),
                    "remove tools:, or write the tool descriptions into the prompt text",
                )
    for nid, node in g.nodes.items():
        if isinstance(node, LLMNode) and node.tools is not None and _completion(g, node):
            yield Diagnostic(
                "E310",
                f"node '{nid}' is in completion mode, which has no chat template to render tools",
                g.span("nodes", nid, "tools"),
                "remove tools:, or write the tool descriptions into the prompt text",
            )


def _mode(completion: bool) -> str:
    return "completion mode (no chat template)" if completion else "a chat template"
