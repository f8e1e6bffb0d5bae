"""slime's `args` -> a typed `SlimeConfig`, once, at the boundary.

Input: the argparse Namespace slime passes to generate/reward functions, and the plan.
Output: `SlimeConfig` (frozen): where each model of the graph is served, the tokenizer path, limits.

Invariants: a graph model that is neither in `args.sglang_model_routers` (models slime serves via
--sglang-config) nor given a `url:` in the graph is an error naming the model, never a silent
fallback to the policy's router (slime itself falls back silently).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..plan import Plan
from ...spec.model import POLICY


class SlimeConfigError(ValueError):
    pass


@dataclass(frozen=True)
class SlimeConfig:
    hf_checkpoint: str
    urls: Mapping[str, str]  # model name -> base URL of its SGLang router / server
    max_response_len: int | None
    max_context_len: int | None
    partial_rollout: bool
    apply_chat_template: bool
    reward_key: str | None
    timeout_s: float


def _url(value: Any) -> str:
    if isinstance(value, str):
        return value if value.startswith("http") else f"http://{value}"
    ip, port = value  # slime stores (ip, port)
    return f"http://{ip}:{port}"


def from_args(args: Any, plan: Plan) -> SlimeConfig:
    get = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    ip, port = get("sglang_router_ip"), get("sglang_router_port")
    if ip is None or port is None:
        raise SlimeConfigError("slime args have no sglang_router_ip/sglang_router_port: the policy's router "
                               "is unknown (is this running inside slime's rollout manager?)")
    routers: Mapping[str, Any] = get("sglang_model_routers") or {}
    urls = {POLICY: _url((ip, port))}
    missing = []
    for name, decl in plan.models.items():
        if name == POLICY:
            continue
        if name in routers:
            urls[name] = _url(routers[name])
        elif decl.url:
            urls[name] = decl.url
        else:
            missing.append(name)
    if missing:
        served = ", ".join(sorted(routers)) or "none"
        raise SlimeConfigError(
            f"model(s) {', '.join(missing)} of graph '{plan.name}' have no endpoint: not in slime's "
            f"--sglang-config (it serves: {served}) and no url: in the graph. Add them to the sglang config "
            "that `graphrl compile` writes, or give url: in the graph.")
    hf = get("hf_checkpoint")
    if not hf:
        raise SlimeConfigError("slime args have no hf_checkpoint: graphrl needs the policy's tokenizer")
    return SlimeConfig(
        hf_checkpoint=str(hf), urls=urls, max_response_len=get("rollout_max_response_len"),
        max_context_len=get("rollout_max_context_len"), partial_rollout=bool(get("partial_rollout", False)),
        apply_chat_template=bool(get("apply_chat_template", False)), reward_key=get("reward_key"),
        timeout_s=float(get("graphrl_request_timeout_s", 900.0) or 900.0))
