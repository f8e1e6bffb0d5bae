"""Endpoint wiring for commands: a plan + engine choice -> `StaticEndpoints` (engines + renderers).

Input: the plan's model names, the engine kind (`local`: the embedded transformers model; `sglang`:
HTTP), the policy URL/model, per-model URL overrides, and the tokenizer name.
Output: `StaticEndpoints` mapping every model the plan names to an engine.

Rules: with `local`, every model of the graph (policy and frozen) runs on the one embedded model
unless `endpoints` gives it a URL; with `sglang`, the policy is at `url` and each frozen model at its
declared `url:` or an override — a frozen model with neither is an error, never a silent fallback.
"""

from __future__ import annotations

from typing import Mapping

from ..plan import Plan
from ..runtime.chat import ChatRenderer
from ..runtime.services import StaticEndpoints
from ..spec.model import POLICY


class WiringError(ValueError):
    pass


def build_endpoints(plan: Plan, *, engine: str, model: str | None = None, url: str | None = None,
                    tokenizer: str | None = None, endpoints: Mapping[str, str] | None = None,
                    device: str | None = None, timeout_s: float = 900.0) -> StaticEndpoints:
    from .sglang import SGLangEngine

    overrides = dict(endpoints or {})
    unknown = sorted(set(overrides) - set(plan.models))
    if unknown:
        raise WiringError(f"--endpoint names unknown model(s) {', '.join(unknown)}; the graph declares "
                          f"{', '.join(sorted(plan.models))}")
    engines = {}
    caps = {name: d.max_concurrency for name, d in plan.models.items() if d.max_concurrency}
    if engine == "local":
        from ..models.registry import load_model
        from .local import LocalEngine

        hf_model, hf_tok = load_model(model or "smollm2")
        local = LocalEngine(hf_model, hf_tok, device=device)
        renderer = ChatRenderer(hf_tok)
        for name in plan.models:
            engines[name] = SGLangEngine(overrides[name], timeout_s=timeout_s) if name in overrides else local
        return StaticEndpoints(engines, renderer, max_concurrency=caps)
    if engine != "sglang":
        raise WiringError(f"unknown engine {engine!r}: use local or sglang")
    from ..models.registry import resolve_tokenizer

    renderer = ChatRenderer(resolve_tokenizer(tokenizer or "qwen"))
    for name, decl in plan.models.items():
        target = overrides.get(name) or (url if name == POLICY else decl.url)
        if target is None:
            raise WiringError(f"model '{name}' has no URL: give --endpoint {name}=http://HOST:PORT"
                              + (" (or --url for the policy)" if name == POLICY else ""))
        engines[name] = SGLangEngine(target, timeout_s=timeout_s)
    return StaticEndpoints(engines, renderer, max_concurrency=caps)
