"""The compiled generate / reward / reward-post-process functions slime calls (slime-contract.md).

Input: slime's `args`, the `Sample` it passes in (duck-typed: nothing here imports slime), its
sampling params; the plan this target was compiled from.
Output: the same `Sample` filled (one training sample per rollout), or `list[Sample]` for fan-out
graphs (siblings share `rollout_id = sample.index`, rewards already credited); graphrl's spans,
calls and path in `sample.metadata["graphrl"]`.

Invariants: tokens are prompt ids then response ids exactly as the ledger built them (nothing is
re-tokenised here); `append_response_tokens` is used when the object has it (trainable runs with
log-probs, untrained runs without); statuses follow the last engine call (stop/length/abort ->
COMPLETED/TRUNCATED/ABORTED); after an abort no new call starts; a rollout that fails ends as a
well-formed sample with remove_sample=True instead of raising.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path
from typing import Any

from ...runtime.executor import Executor, RolloutInput, RolloutResult
from ...runtime.ledger import TrainingSample
from ..plan import Plan, load_plan
from .config import SlimeConfig, SlimeConfigError, from_args

_STATUS = {"completed": "COMPLETED", "truncated": "TRUNCATED", "aborted": "ABORTED", "failed": "FAILED"}


def _status(sample: Any, name: str) -> Any:
    """slime's Sample.Status member by name (works with the real class and with stand-ins)."""
    enum = getattr(type(sample), "Status", None)
    return getattr(enum, _STATUS[name]) if enum is not None else _STATUS[name].lower()


class SlimeTarget:
    """One per compiled module. Holds the per-process executor (engines, tokenizer) for its plan."""

    def __init__(self, plan_path: str | Path):
        self.plan_path = Path(plan_path)
        self._plan: Plan | None = None
        self._built: tuple[int, SlimeConfig, Executor] | None = None

    # ------------------------------------------------------------------ boundary
    def plan(self, args: Any = None) -> Plan:
        path = getattr(args, "graphrl_plan_path", None) or self.plan_path
        if self._plan is None:
            self._plan = load_plan(path)
        return self._plan

    def _executor(self, args: Any, sampling_params: dict[str, Any]) -> tuple[SlimeConfig, Executor]:
        if self._built is not None and self._built[0] == id(args):
            return self._built[1], self._built[2]
        plan = self.plan(args)
        cfg = from_args(args, plan)
        if cfg.partial_rollout and plan.training.fanout:
            raise SlimeConfigError(f"graph '{plan.name}' yields several samples per rollout; slime's "
                                   "--partial-rollout cannot resume those. Remove --partial-rollout.")
        from ...engines.sglang import SGLangEngine
        from ...rewards.scorer import RewardBox
        from ...runtime.chat import ChatRenderer
        from ...runtime.services import StaticEndpoints
        from ...tools.registry import ToolBox
        from ._tokenizer import load_tokenizer

        renderer = ChatRenderer(load_tokenizer(cfg.hf_checkpoint))
        engines = {name: SGLangEngine(url, timeout_s=cfg.timeout_s) for name, url in cfg.urls.items()}
        caps = {n: d.max_concurrency for n, d in plan.models.items() if d.max_concurrency}
        search = [Path(plan.source.get("file", ".")).parent, self.plan_path.parent]
        executor = Executor(plan, StaticEndpoints(engines, renderer, max_concurrency=caps),
                            tools=ToolBox(search), rewards=RewardBox(search), sampling=_base_sampling(sampling_params))
        self._built = (id(args), cfg, executor)
        return cfg, executor

    # ------------------------------------------------------------------ generate
    async def generate(self, args: Any, sample: Any, sampling_params: dict[str, Any],
                       evaluation: bool = False) -> Any:
        cfg, executor = self._executor(args, sampling_params)
        plan = executor.plan
        if getattr(sample, "response_length", 0) and str(getattr(sample, "status", "")).lower().endswith("aborted"):
            _reset_to_prompt(sample)  # --partial-rollout: graphs restart from the prompt
        if evaluation:
            executor = _with_sampling(executor, sampling_params)
        session = getattr(sample, "session_id", None) or f"graphrl-eval-{getattr(sample, 'index', 0)}-{uuid.uuid4().hex[:8]}"
        row = {"prompt": sample.prompt, "label": sample.label, "metadata": dict(getattr(sample, "metadata", None) or {})}
        index = getattr(sample, "index", None)
        res = await executor.run(RolloutInput(row=row, rollout_id=index if index is not None else 0,
                                              group=getattr(sample, "group_index", None) or 0,
                                              seed=sampling_params.get("sampling_seed"), session_id=session))
        out = [self._fill(args, sample if i == 0 else _sibling(sample), s, res, plan)
               for i, s in enumerate(res.samples)] or [self._empty(args, sample, res, executor)]
        if plan.training.fanout:
            return out
        return out[0]

    def _fill(self, args: Any, target: Any, s: TrainingSample, res: RolloutResult, plan: Plan) -> Any:
        prompt, resp = list(s.prompt_ids), list(s.response_ids)
        target.tokens = list(prompt)
        target.response_length = 0
        target.response = ""
        target.loss_mask = None
        target.rollout_log_probs = None
        if hasattr(target, "append_response_tokens"):
            last = s.calls[-1].finish_reason if s.calls else "stop"
            for sp in s.spans:
                trainable = bool(sp.mask)
                target.append_response_tokens(
                    args, tokens=resp[sp.start:sp.end],
                    log_probs=list(s.rollout_log_probs[sp.start:sp.end]) if trainable else None,
                    trainable=trainable, update_terminal_info=False)
            if last in ("stop", "length", "abort"):
                target.append_response_tokens(args, tokens=[], meta_info={"finish_reason": {"type": last}})
        else:
            target.tokens = prompt + resp
            target.response_length = len(resp)
            target.loss_mask = list(s.loss_mask)
            target.rollout_log_probs = list(s.rollout_log_probs)
        target.response = _decode_response(self, s)
        target.status = _status(target, s.status)
        target.rollout_id = getattr(target, "index", None) if res.rollout_id is None else res.rollout_id
        target.reward = s.reward if res.status in ("completed", "truncated") else 0.0
        if res.status in ("failed",) or res.error == "the graph routed to abort":
            target.remove_sample = True
        meta = dict(getattr(target, "metadata", None) or {})
        meta["graphrl"] = {
            "graph": plan.name, "rollout_id": res.rollout_id, "sample_index": s.index,
            "num_samples": len(res.samples), "status": res.status, "error": res.error,
            "rollout_reward": res.reward, "credit": plan.reward.credit if plan.reward else None,
            "spans": [sp.to_json() for sp in s.spans], "calls": [c.to_json() for c in s.calls],
            "path": [list(p) for p in res.path] if s.index == 0 else None,
            "rollout_calls": [c.to_json() for c in res.calls] if s.index == 0 else None,
        }
        target.metadata = meta
        return target

    def _empty(self, args: Any, sample: Any, res: RolloutResult, executor: Executor) -> Any:
        """A rollout with no training sample (e.g. failed before the first policy call): a well-formed
        one-token placeholder that trains nothing (remove_sample), carrying the error."""
        renderer = executor.endpoints.renderer("policy")
        pad = min(renderer.stop_token_ids) if renderer.stop_token_ids else 0
        sample.tokens = [pad, pad]
        sample.response_length = 1
        sample.response = ""
        sample.loss_mask = [0]
        sample.rollout_log_probs = [0.0]
        sample.status = _status(sample, res.status if res.status != "completed" else "failed")
        sample.reward = 0.0
        sample.remove_sample = True
        sample.rollout_id = getattr(sample, "index", None)
        meta = dict(getattr(sample, "metadata", None) or {})
        meta["graphrl"] = {"graph": executor.plan.name, "rollout_id": res.rollout_id, "sample_index": 0,
                           "num_samples": 0, "status": res.status, "error": res.error, "spans": [],
                           "calls": [], "path": [list(p) for p in res.path],
                           "rollout_calls": [c.to_json() for c in res.calls], "rollout_reward": None}
        sample.metadata = meta
        return sample

    # ------------------------------------------------------------------ rewards
    async def reward_func(self, args: Any, sample: Any, **kwargs: Any) -> Any:
        """The credited reward generate already computed (one sample or a list of siblings)."""
        if isinstance(sample, list):
            return [await self.reward_func(args, s) for s in sample]
        if sample.reward is not None:
            return sample.reward
        info = (getattr(sample, "metadata", None) or {}).get("graphrl")
        if info is None:
            raise ValueError("this sample was not produced by a graphrl generate function: no reward to give")
        return 0.0 if info.get("rollout_reward") is None else info["rollout_reward"]

    def post_process_rewards(self, args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
        """Per prompt group: one reward per rollout (not per sample), group-normalised like GRPO, then
        credited to the rollout's samples (even: / n, broadcast: x 1). Returns (raw, normalised)."""
        from .rewards import post_process

        return post_process(args, samples, self.plan(args))


def _decode_response(target: SlimeTarget, s: TrainingSample) -> str:
    built = target._built
    if built is None:
        return ""
    return built[2].endpoints.renderer("policy").decode(s.response_ids)


def _base_sampling(sampling_params: dict[str, Any]) -> dict[str, Any]:
    keep = ("temperature", "top_p", "top_k", "min_p", "skip_special_tokens", "no_stop_trim",
            "spaces_between_special_tokens", "custom_params", "repetition_penalty")
    return {k: copy.deepcopy(sampling_params[k]) for k in keep if k in sampling_params}


def _with_sampling(executor: Executor, sampling_params: dict[str, Any]) -> Executor:
    """Eval may pass other sampling params (one shared dict: copied, never mutated)."""
    if _base_sampling(sampling_params) == executor.sampling:
        return executor
    clone = copy.copy(executor)
    clone.sampling = _base_sampling(sampling_params)
    return clone


def _sibling(sample: Any) -> Any:
    new = copy.deepcopy(sample)
    return new


def _reset_to_prompt(sample: Any) -> None:
    sample.tokens = []
    sample.response = ""
    sample.response_length = 0
    sample.loss_mask = None
    sample.rollout_log_probs = None
    sample.reward = None

