"""Endpoint wiring for commands: a plan + engine choice -> `StaticEndpoints` (engines + renderers).

Input: the plan's model names, the engine kind (`local`: the embedded transformers model; `sglang`:
HTTP), the policy URL/model, per-model URL overrides, and the tokenizer name.
Output: `StaticEndpoints` mapping every model the plan names to an engine.

Rules: with `local`, every model of the graph (policy and frozen) runs on the one embedded model
unless `endpoints` gives it a URL; with `sglang`, the policy is at `url` and each frozen model at its
declared `url:` or an override — a frozen model with neither is an error, never a silent fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engines.local import LocalEngine
from ..engines.sglang import SGLangEngine
from ..errors import UsageProblem
from ..models.registry import embedding_rows, load_model, resolve_tokenizer
from ..plan import Plan
from ..runtime.chat import ChatRenderer
from ..runtime.services import StaticEndpoints, endpoints_for_plan
from ..spec.model import POLICY

DEFAULT_TIMEOUT_S = 900.0  # one engine call, over HTTP


class WiringError(UsageProblem):
    """The engines asked for do not fit the graph (a model without a URL, an unknown name): exit 2."""


def load_local_engine(model: str, tokenizer: str | None = None, device: str | None = None) -> tuple[Any, Any]:
    """(LocalEngine, tokenizer) for a built-in model name or a HF directory; torch is imported here, lazily."""
    hf_model, hf_tok = load_model(model)
    if tokenizer is not None:
        hf_tok = resolve_tokenizer(tokenizer)
    return LocalEngine(hf_model, hf_tok, device=None if device == "auto" else device), hf_tok


def build_endpoints(
    plan: Plan,
    *,
    engine: str,
    model: str | None = None,
    url: str | None = None,
    tokenizer: str | None = None,
    endpoints: Mapping[str, str] | None = None,
    device: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> StaticEndpoints:
    overrides = dict(endpoints or {})
    unknown = sorted(set(overrides) - set(plan.models))
    if unknown:
        raise WiringError(
            f"--endpoint names unknown model(s) {', '.join(unknown)}; the graph declares "
            f"{', '.join(sorted(plan.models))}"
        )
    engines: dict[str, Any] = {}
    if engine == "local":
        local, hf_tok = load_local_engine(model or "smollm2", device=device)
        for name, decl in plan.models.items():
            engines[name] = (
                SGLangEngine(overrides[name], timeout_s=decl.timeout_s or timeout_s) if name in overrides else local
            )
        return endpoints_for_plan(plan, engines, ChatRenderer(hf_tok, vocab_size=local.vocab_size))
    if engine != "sglang":
        raise WiringError(f"unknown engine {engine!r}: use local or sglang")

    spec = tokenizer or "qwen"
    renderer = ChatRenderer(resolve_tokenizer(spec), vocab_size=embedding_rows(spec))
    for name, decl in plan.models.items():
        target = overrides.get(name) or (url if name == POLICY else decl.url)
        if target is None:
            raise WiringError(
                f"model '{name}' has no URL: give --endpoint {name}=http://HOST:PORT"
                + (" (or --url for the policy)" if name == POLICY else "")
            )
        engines[name] = SGLangEngine(target, timeout_s=decl.timeout_s or timeout_s)
    return endpoints_for_plan(plan, engines, renderer)
