"""A stand-in for slime's `Sample` (slime/utils/types.py), written for these tests — not slime's code.

It carries slime's field names, a `Status` enum with slime's values, and re-implements the observable
semantics of `Sample.append_response_tokens` as read from slime's source (commit 624b824):
  * tokens extend `tokens` and `response_length`; `loss_mask` is created as all ones for an
    existing response, then extended with 1 (trainable) or 0;
  * trainable tokens need log-probs (ValueError otherwise); non-trainable tokens must not pass
    log-probs and get 0.0; `rollout_log_probs` is created as zeros for an existing response
    (ValueError when trainable log-probs arrive after a response without any);
  * `meta_info` with a `finish_reason` (and `update_terminal_info`) adds prefix-cache counters,
    the weight version and (under args.sglang_speculative_algorithm) the spec counters, and sets the status: length -> TRUNCATED, abort -> ABORTED, stop -> COMPLETED;
  * afterwards len(loss_mask) and len(rollout_log_probs) must equal response_length (ValueError).
Top-p replay and routed-expert data are not modelled (graphrl refuses the flags that need them).

`SampleStandInNoAppend` is the same object without `append_response_tokens`, for the direct path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class PrefixCacheInfoStandIn:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0


@dataclass
class SpecInfoStandIn:
    """slime's Sample.SpecInfo counters: `add(meta_info)` sums them (completion_tokens too)."""

    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0

    def add(self, meta_info: dict) -> None:
        self.spec_accept_token_num += meta_info.get("spec_accept_token_num", 0)
        self.spec_draft_token_num += meta_info.get("spec_draft_token_num", 0)
        self.spec_verify_ct += meta_info.get("spec_verify_ct", 0)
        self.completion_token_num += meta_info.get("completion_tokens", 0)


@dataclass
class SampleStandInNoAppend:
    """slime's Sample fields (the ones generate functions touch), no append_response_tokens."""

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: Any = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_top_p_token_ids: Any = None
    rollout_top_p_token_offsets: Any = None
    rollout_routed_experts: Any = None
    remove_sample: bool = False

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    session_id: str | None = None
    prefix_cache_info: PrefixCacheInfoStandIn = field(default_factory=PrefixCacheInfoStandIn)
    spec_info: SpecInfoStandIn = field(default_factory=SpecInfoStandIn)


@dataclass
class SampleStandIn(SampleStandInNoAppend):
    """With append_response_tokens, re-implemented from slime's semantics (see the module docstring)."""

    def append_response_tokens(
        self,
        args=None,
        *,
        tokens=None,
        log_probs=None,
        trainable: bool = True,
        meta_info: dict | None = None,
        text: str | None = None,
        update_terminal_info: bool = True,
    ) -> None:
        tokens = [int(t) for t in (tokens or [])]
        log_probs = None if log_probs is None else [float(x) for x in log_probs]
        if log_probs is not None and len(log_probs) != len(tokens):
            raise ValueError(f"log_probs length {len(log_probs)} != tokens length {len(tokens)}")
        if tokens and trainable and log_probs is None:
            raise ValueError("trainable response tokens require rollout log probabilities.")
        if tokens and not trainable:
            if log_probs is not None:
                raise ValueError("non-trainable response tokens should not pass rollout log probabilities.")
            log_probs = [0.0] * len(tokens)
        if text is not None:
            self.response += text
        before = self.response_length
        if tokens:
            self.tokens += tokens
            self.response_length += len(tokens)
            if self.loss_mask is None:
                self.loss_mask = [1] * before
            self.loss_mask += [1 if trainable else 0] * len(tokens)
        if log_probs is not None:
            if self.rollout_log_probs is None:
                if trainable and before:
                    raise ValueError("trainable log-probs after a response without rollout_log_probs")
                self.rollout_log_probs = [0.0] * before
            self.rollout_log_probs += log_probs
        if meta_info is not None and update_terminal_info and "finish_reason" in meta_info:
            if getattr(args, "sglang_speculative_algorithm", None):
                self.spec_info.add(meta_info)
            self.prefix_cache_info.cached_tokens += meta_info.get("cached_tokens", 0)
            self.prefix_cache_info.total_prompt_tokens += meta_info.get("prompt_tokens", 0)
            if "weight_version" in meta_info:
                self.weight_versions.append(meta_info["weight_version"])
            kind = meta_info["finish_reason"]["type"]
            if kind == "length":
                self.status = self.Status.TRUNCATED
            elif kind == "abort":
                self.status = self.Status.ABORTED
            elif kind == "stop":
                self.status = self.Status.COMPLETED
        if self.loss_mask is not None and len(self.loss_mask) != self.response_length:
            raise ValueError(f"loss_mask length {len(self.loss_mask)} != response_length {self.response_length}")
        if self.rollout_log_probs is not None and len(self.rollout_log_probs) != self.response_length:
            raise ValueError("rollout_log_probs length != response_length")


class ArgsStandIn:
    """slime's args namespace as a generate function sees it (the attributes graphrl reads)."""

    def __init__(self, **overrides: Any):
        self.sglang_router_ip = "127.0.0.1"
        self.sglang_router_port = 1
        self.sglang_model_routers = None
        self.hf_checkpoint = "qwen"
        self.rollout_max_response_len = 1024
        self.rollout_max_context_len = None
        self.partial_rollout = False
        self.mask_offpolicy_in_partial_rollout = False
        self.group_rm = False
        self.dynamic_sampling_filter_path = None
        self.custom_reward_post_process_path = None
        self.use_dynamic_batch_size = True
        self.log_passrate = False
        self.apply_chat_template = False
        self.rollout_top_p = 1.0
        self.use_rollout_routing_replay = False
        self.reward_key = None
        self.router_policy = None
        self.sglang_speculative_algorithm = None
        self.n_samples_per_prompt = 2
        self.advantage_estimator = "grpo"
        self.rewards_normalization = True
        self.grpo_std_normalization = True
        for k, v in overrides.items():
            setattr(self, k, v)
