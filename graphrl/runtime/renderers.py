"""Which chat renderer a call or a thread uses: the model's tokenizer with the plan's template settings.

Input: the `Plan` (each model's `chat_template` text, `chat_template_kwargs`, `completion`; each llm
node's `completion`) and the `Endpoints` (each model's tokenizer renderer).
Output: `ModelRenderers.for_call(model, node)` and `.for_thread(name)`: `ChatRenderer`s, built once
per (model, mode) and cached; the default template keeps its native ChatML fast path.

Rules: a node's `completion` overrides its model's; a thread renders with the model of the llm nodes
that continue it (when they all name one model; else the policy's) in the mode they share (the
checker refuses a thread mixing completion and chat calls, E310; a dynamic `llm:` that does so
fails its rollout at the call).
"""

from __future__ import annotations

from typing import Any

from ..plan import Plan
from ..spec.common import POLICY
from ..spec.model import LLMNode
from .chat import ChatRenderer
from .scope import RenderError
from .services import Endpoints


def node_completion(plan: Plan, node: Any, model: str) -> bool:
    """Whether a call of `node` on `model` is in completion mode (no chat template)."""
    if getattr(node, "completion", None) is not None:
        return bool(node.completion)
    decl = plan.models.get(model)
    return bool(decl is not None and decl.completion)


class ModelRenderers:
    def __init__(self, plan: Plan, endpoints: Endpoints):
        self.plan = plan
        self.endpoints = endpoints
        self._cache: dict[tuple[str, bool], ChatRenderer] = {}
        self._threads: dict[str, tuple[str, bool]] = {}
        for name in plan.threads:
            users = [n for n in plan.nodes.values() if isinstance(n, LLMNode) and n.thread == name]
            models = {n.llm for n in users if not n.dynamic_model}
            model = next(iter(models)) if len(models) == 1 else POLICY
            modes = {node_completion(plan, n, n.llm) for n in users if not n.dynamic_model}
            self._threads[name] = (model, modes == {True})
        for name in plan.models:  # decoding tables built now, with the executor, never inside a rollout's time
            warm = getattr(endpoints.renderer(name), "warm", None)
            if warm is not None:
                warm()

    def for_model(self, model: str, completion: bool | None = None) -> ChatRenderer:
        """The model's renderer; `completion` None: the model's own mode."""
        if completion is None:
            completion = node_completion(self.plan, None, model)
        key = (model, completion)
        out = self._cache.get(key)
        if out is None:
            base = self.endpoints.renderer(model)
            decl = self.plan.models.get(model)
            try:
                if completion:
                    out = base.variant(completion=True)
                elif decl is not None and (decl.chat_template or decl.chat_template_kwargs):
                    out = base.variant(chat_template=decl.chat_template, template_kwargs=decl.chat_template_kwargs)
                else:
                    out = base
            except Exception as exc:  # a plan edited by hand: a template that does not compile
                raise RenderError(
                    self.plan.span("models", model, "chat_template"),
                    f"the chat template of model '{model}' cannot be used: {type(exc).__name__}: {exc}",
                ) from None
            self._cache[key] = out
        return out

    def for_call(self, model: str, node: Any) -> ChatRenderer:
        return self.for_model(model, node_completion(self.plan, node, model))

    def for_thread(self, name: str) -> ChatRenderer:
        model, completion = self._threads.get(name, (POLICY, False))
        return self.for_model(model, completion)
