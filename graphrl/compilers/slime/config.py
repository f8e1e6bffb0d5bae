"""slime's `args` -> a typed `SlimeConfig`, once, at the boundary (docs/architecture.md, slime contract §3).

Input: the argparse Namespace slime passes to generate/reward functions, and the plan.
Output: `SlimeConfig` (frozen): where each model of the graph is served, the tokenizer paths,
limits, the reward key; or `SlimeConfigError` naming every problem at once.

Invariants:
- a graph model that is neither in `args.sglang_model_routers` (models slime serves via
  --sglang-config) nor given a `url:` in the graph is an error naming the model, never a silent
  fallback to the policy's router (slime itself falls back silently);
- slime flags that cannot work with this graph are refused here with the fix, before any rollout:
  for fan-out graphs --partial-rollout, --group-rm, --dynamic-sampling-filter-path, --log-passrate,
  slime's fully_async_rollout, a missing --custom-reward-post-process-path or --use-dynamic-batch-size; for every graph
  --apply-chat-template (the graph renders its own prompts), top-p replay (--rollout-top-p != 1) and
  MoE routing replay (graphrl does not forward the per-token data they need); on-policy distillation
  with a teacher server (--use-opd --opd-type sglang) for a graph with a reward or a fan-out graph,
  unless the graph declares its teacher (`slime.teacher`: then those flags are required instead);
- with --rollout-external-engine-addrs slime serves no graph model (serve:), so such a graph is refused;
- a flag the namespace does not carry at all is not checked, and without a router / hf_checkpoint
  in `args` the graph's own policy `url:` / `tokenizer:` are used (a hand-made `args` outside
  slime, e.g. slime's plugin contract tests); inside slime, args always win.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...plan import Plan
from ...spec.model import POLICY
from .settings import settings_of

_MISSING = object()


class SlimeConfigError(ValueError):
    """slime's flags do not fit this graph; the message says what to change."""


@dataclass(frozen=True)
class SlimeConfig:
    hf_checkpoint: str
    urls: Mapping[str, str]  # model name -> base URL of its SGLang router / server
    tokenizers: Mapping[str, str]  # frozen model -> its own tokenizer (graph `tokenizer:`)
    max_response_len: int | None
    max_context_len: int | None  # --rollout-max-context-len: bounds every trained call's prompt + output
    partial_rollout: bool
    reward_key: str | None
    timeout_s: float
    fanout: bool
    source_dir: str | None = None  # the graph's directory (slime_args.yaml): user tools and rewards
    eval_max_context_len: int | None = None  # --eval-max-context-len (slime defaults it to the rollout's)
    teacher: str | None = None  # slime.teacher: its log-probs fill teacher_log_probs (--use-opd --opd-type sglang)


def module_name(plan: Plan) -> str:
    """The importable name of the compiled module (slime's dotted paths start with it)."""
    return "graphrl_" + re.sub(r"\W", "_", plan.name)


def _url(value: Any) -> str:
    """A router address as slime stores it ((ip, port), or a URL string) -> a URL; the engine
    normalises URLs (scheme, trailing slash) in one place, `SGLangEngine`."""
    if isinstance(value, str):
        return value
    ip, port = value
    return f"http://{ip}:{port}"


def _flag(args: Any, name: str) -> Any:
    return getattr(args, name, _MISSING)


def _set(args: Any, name: str) -> bool:
    value = _flag(args, name)
    return value is not _MISSING and bool(value)


def flag_problems(args: Any, plan: Plan) -> list[str]:
    """Every slime flag in `args` that cannot work with this graph, each with its fix."""
    out: list[str] = []
    mod = module_name(plan)
    if plan.training.fanout:
        why = f"graph '{plan.name}' yields several training samples per rollout (fan-out), and slime's "
        if _set(args, "partial_rollout"):
            out.append(
                why + "--partial-rollout would re-enter generate with one sample of a list: remove --partial-rollout"
            )
        if _set(args, "group_rm"):
            out.append(
                why + "--group-rm expects one sample per rollout: remove --group-rm "
                "(generate already fills the rewards)"
            )
        if _set(args, "dynamic_sampling_filter_path"):
            out.append(why + "--dynamic-sampling-filter-path counts samples, not rollouts: remove it")
        if _set(args, "log_passrate"):
            out.append(why + "--log-passrate reshapes rewards by --n-samples-per-prompt and fails: remove it")
        rollout_fn = _flag(args, "rollout_function_path")
        if isinstance(rollout_fn, str) and "fully_async" in rollout_fn:
            out.append(
                why + f"fully_async_rollout ({rollout_fn}) orders finished groups by int(sample.index) "
                "and fails on a group of sample lists (int() of a list's index method): use slime's "
                "default --rollout-function-path (train_async.py works with it too)"
            )
        if _flag(args, "custom_reward_post_process_path") is None:
            out.append(
                why + "default GRPO normalisation merges uneven prompt groups into one: add "
                f"--custom-reward-post-process-path {mod}.post_process_rewards"
            )
        if _flag(args, "use_dynamic_batch_size") is False:
            out.append(
                why + "static micro-batches need a fixed sample count per step: add "
                "--use-dynamic-batch-size (with --max-tokens-per-gpu)"
            )
    elif (
        plan.reward is not None
        and plan.reward.group is not None
        and _flag(args, "custom_reward_post_process_path") is None
    ):
        out.append(
            f"graph '{plan.name}' has a group reward ({plan.reward.group.fn}): add "
            f"--custom-reward-post-process-path {mod}.post_process_rewards"
        )
    if _set(args, "apply_chat_template"):
        out.append(
            "--apply-chat-template hands generate an already templated prompt string, but the graph "
            "renders its own prompts from the raw row: remove --apply-chat-template"
        )
    top_p = _flag(args, "rollout_top_p")
    if top_p is not _MISSING and top_p is not None and float(top_p) != 1.0:
        out.append(
            f"--rollout-top-p {top_p} makes slime train with top-p replay data that graphrl's "
            "engine client does not forward: use --rollout-top-p 1 (set top_p per node in the graph "
            "only for untrained nodes)"
        )
    out += _opd_problems(args, plan)
    served = sorted(n for n, d in plan.models.items() if n != POLICY and d.serve is not None)
    if served and _set(args, "rollout_external_engine_addrs"):
        out.append(
            f"graph '{plan.name}' asks slime to serve {', '.join(served)} (serve:), but with "
            "--rollout-external-engine-addrs slime starts no engines and ignores --sglang-config: it routes "
            "only to the external policy engines. Give those models url: (servers you run), or drop the flag"
        )
    if _set(args, "multimodal_keys"):
        out.append(
            "--multimodal-keys gives samples images/videos, but a graph renders text prompts from the row "
            "and would drop them: remove --multimodal-keys"
        )
    if _set(args, "use_rollout_routing_replay"):
        out.append(
            "--use-rollout-routing-replay needs per-token routed experts that graphrl does not forward: remove it"
        )
    key = _flag(args, "reward_key")
    graph_key = plan.reward.key if plan.reward is not None else None
    if key not in (_MISSING, None) and graph_key is not None and key != graph_key:
        out.append(
            f"--reward-key {key} differs from the graph's reward.key '{graph_key}': "
            "generate credits the graph's key; drop --reward-key or make them equal"
        )
    return out


def _opd_problems(args: Any, plan: Plan) -> list[str]:
    """On-policy distillation. With `slime.teacher` generate fills teacher_log_probs itself, so slime
    must run --use-opd --opd-type sglang (megatron would compute them again from --opd-teacher-load).
    Without it, --opd-type sglang means slime's own OPD reward function and post-process, which a
    graph reward (generate fills the reward, so slime never calls its function) or fan-out breaks."""
    teacher = settings_of(plan).teacher
    use_opd, opd_type = _flag(args, "use_opd"), _flag(args, "opd_type")
    if teacher is not None:  # flags the namespace does not carry are not checked (launch: only the extras)
        if (use_opd is not _MISSING and not use_opd) or (opd_type is not _MISSING and opd_type != "sglang"):
            now = "without --use-opd" if use_opd is not _MISSING and not use_opd else f"--opd-type {opd_type}"
            return [
                f"graph '{plan.name}' declares slime.teacher '{teacher}' (generate fills teacher_log_probs from it), "
                f"but slime runs {now}: use --use-opd --opd-type sglang (graphrl compile's command has them), "
                "or remove teacher: from the graph"
            ]
        return []
    if not (use_opd is not _MISSING and use_opd and opd_type == "sglang"):
        return []
    opd = (
        "--use-opd --opd-type sglang takes the teacher's log-probs from slime's on-policy-distillation "
        "reward function (--custom-rm-path slime.rollout.on_policy_distillation.reward_func asks the "
        "teacher server; its post-process reads them back from each sample's reward), "
    )
    if plan.reward is not None:
        return [
            opd + f"but graph '{plan.name}' computes its own reward in generate, so slime never calls that "
            "reward function and its post-process fails on a float: declare the teacher in the graph "
            "(slime: {teacher: MODEL}, the model under models:; generate then fills teacher_log_probs and "
            "the graph's reward stays), use --opd-type megatron (--opd-teacher-load), or remove reward:"
        ]
    if plan.training.fanout:
        return [
            opd + f"and fan-out graph '{plan.name}' needs graphrl's post_process_rewards instead of "
            "slime's: declare the teacher in the graph (slime: {teacher: MODEL}) or use --opd-type megatron"
        ]
    return []


def _positive(value: Any) -> int | None:
    return int(value) if value not in (None, False) and int(value) > 0 else None


def from_args(args: Any, plan: Plan) -> SlimeConfig:
    """The typed view of `args` for this plan; SlimeConfigError lists every problem found."""
    get = lambda name, default=None: getattr(args, name, default)
    problems = flag_problems(args, plan)
    policy = plan.models.get(POLICY)
    ip, port = get("sglang_router_ip"), get("sglang_router_port")
    urls: dict[str, str] = {}
    if ip is not None and port is not None:
        urls[POLICY] = _url((ip, port))
    elif policy is not None and policy.url:
        urls[POLICY] = _url(policy.url)  # outside slime's rollout manager (no router): the graph's url
    else:
        problems.append(
            "slime args have no sglang_router_ip/sglang_router_port: the policy's router is "
            "unknown (is this running inside slime's rollout manager?)"
        )
    routers: Mapping[str, Any] = get("sglang_model_routers") or {}
    missing = []
    for name, decl in plan.models.items():
        if name == POLICY:
            continue
        if name in routers:
            urls[name] = _url(routers[name])
        elif decl.url:
            urls[name] = _url(decl.url)
        else:
            missing.append(name)
    if missing:
        served = ", ".join(sorted(routers)) or "none"
        problems.append(
            f"model(s) {', '.join(missing)} of graph '{plan.name}' have no endpoint: not in slime's "
            f"--sglang-config (it serves: {served}) and no url: in the graph. Pass the sglang_config.yaml "
            "that `graphrl compile` writes for models with serve:, or give url: in the graph"
        )
    hf = get("hf_checkpoint") or (policy.tokenizer if policy is not None else None)
    if not hf:
        problems.append("slime args have no hf_checkpoint: graphrl needs the policy's tokenizer")
    if problems:
        raise SlimeConfigError("graphrl cannot run this slime configuration:\n  - " + "\n  - ".join(problems))
    tokenizers = {n: d.tokenizer for n, d in plan.models.items() if n != POLICY and d.tokenizer}
    return SlimeConfig(
        hf_checkpoint=str(hf),
        urls=urls,
        tokenizers=tokenizers,
        max_response_len=get("rollout_max_response_len"),
        max_context_len=_positive(get("rollout_max_context_len")),
        eval_max_context_len=_positive(get("eval_max_context_len", get("rollout_max_context_len"))),
        partial_rollout=bool(get("partial_rollout", False)),
        reward_key=get("reward_key"),
        timeout_s=float(get("graphrl_request_timeout_s", 900.0) or 900.0),
        fanout=plan.training.fanout,
        source_dir=get("graphrl_source_dir"),
        teacher=settings_of(plan).teacher,
    )


GC_THRESHOLD_ENV = "GRAPHRL_GC_THRESHOLD"


def gc_threshold_from_env(env: Mapping[str, str]) -> tuple[int, int, int] | None:
    """GRAPHRL_GC_THRESHOLD="G0,G1,G2" (opt-in, read once at the edge): the rollout process's garbage
    collector thresholds (`gc.set_threshold`), or None when unset. A rollout process keeps every finished
    sample's token lists until its batch ends, and the collector walks them on each pass while freeing
    nothing (docs/performance.md, "Scale curve"); larger thresholds make those passes rarer.
    SlimeConfigError for anything but three integers with G0 >= 1 and G1, G2 >= 0."""
    raw = env.get(GC_THRESHOLD_ENV, "").strip()
    if not raw:
        return None
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != 3 or not all(p.isdecimal() for p in parts) or int(parts[0]) < 1:
        raise SlimeConfigError(
            f"{GC_THRESHOLD_ENV}={raw!r}: give three whole numbers G0,G1,G2 for gc.set_threshold, "
            "G0 at least 1 (e.g. 50000,20,100); unset it to keep Python's defaults"
        )
    g0, g1, g2 = (int(p) for p in parts)
    return g0, g1, g2
