"""The compiled generate / reward / reward-post-process functions slime calls (docs/architecture.md, slime contract).

Input: slime's `args`, the `Sample` it passes in (duck-typed: nothing here imports slime), its
sampling params, `evaluation`; the plan this target was compiled from.
Output: the same `Sample` filled (one training sample per rollout), or `list[Sample]` for fan-out
graphs in training (the incoming sample first, then deep copies of it as it arrived; all share
`rollout_id = sample.index`, rewards already credited); graphrl's spans, calls and path in
`sample.metadata["graphrl"]`.

Invariants:
- args are converted once per distinct configuration (`config.from_args`); flags that cannot work
  with the graph, and models without an endpoint, raise `SlimeConfigError` before any call;
- tokens are the ledger's (fill.py); statuses follow the engine (stop/length/abort ->
  COMPLETED/TRUNCATED/ABORTED), an abort anywhere makes the rollout ABORTED, and after it no new
  engine or tool call starts (the executor stops at once); slime's own abort flag
  (`GenerateState.aborted`) is read before every node, so a rollout stops at the next node boundary;
- a rollout that failed or was aborted ends as well-formed samples with `remove_sample=True` and a
  zero reward (they still count in their group's normalisation); a rollout without any training
  sample gives one masked placeholder sample;
- a sample that comes back (--partial-rollout, status ABORTED with tokens) restarts from its prompt;
- eval (`evaluation=True`): its own session id, the shared sampling dict is only read, and a
  fan-out rollout gives one sample (its last) carrying the whole rollout reward, so eval means are
  per rollout; an eval dataset's `rm_type` (or another custom_rm_path) scores instead (`_eval_scorer`);
- a graph that routed to `abort` is FAILED for slime (terminal), not ABORTED (slime's "retry");
- `--rollout-max-context-len` bounds every trained call (the executor's `max_context_tokens`);
  multimodal inputs are refused, never dropped;
- `log_rollout` / `log_eval_rollout` (slime's rollout-log hooks) add per-node metrics (metrics.py);
- a graph with `slime.teacher` gets `teacher_log_probs` on every training sample (teacher.py).
"""

from __future__ import annotations

import copy
import gc
import importlib
import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...engines.sglang import SGLangEngine
from ...models.registry import embedding_rows
from ...plan import Plan, load_plan
from ...rewards.scorer import RewardBox
from ...runtime.chat import ChatRenderer
from ...runtime.executor import Executor, RolloutInput, RolloutResult, usage
from ...runtime.ledger import credit_weights
from ...runtime.outcome import settle
from ...runtime.services import endpoints_for_plan
from ...spec.model import POLICY
from ...tools.registry import ToolBox
from ...tools.sandbox_host import SandboxPolicy
from . import fill
from ._tokenizer import load_tokenizer
from .config import SlimeConfig, SlimeConfigError, from_args, gc_threshold_from_env, module_name
from .metrics import eval_node_metrics, node_metrics
from .rewards import post_process
from .teacher import TeacherLogProbs, check_teacher_vocab, score_rollout, zeros

# sampling params slime sends that apply to every graph call (the graph owns stops and lengths)
_SHARED_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "skip_special_tokens",
    "no_stop_trim",
    "spaces_between_special_tokens",
)

EngineFactory = Callable[[str, str, SlimeConfig], Any]  # (model name, url, config) -> Engine


def _sglang_engine(name: str, url: str, cfg: SlimeConfig) -> Any:
    return SGLangEngine(url, timeout_s=cfg.timeout_s)


class SlimeAbortFlag:
    """slime's abort flag (`GenerateState.aborted`, set by slime's `abort()` when a step has enough
    samples), read without importing slime: from the module slime's rollout process already loaded
    and the one instance its SingletonMeta keeps. Read before each node, so a rollout stops at the
    next node boundary (e.g. after a slow tool) instead of starting a new engine call. Outside
    slime (no such module or instance) it is never set."""

    MODULE = "slime.rollout.sglang_rollout"

    def is_set(self) -> bool:
        module = sys.modules.get(self.MODULE)
        if module is None:  # not slime's rollout process (graphrl run, a benchmark): nothing sets it
            return False
        cls = getattr(module, "GenerateState", None)
        instances = getattr(cls, "_instances", None)
        state = instances.get(cls) if isinstance(instances, dict) else None
        return bool(getattr(state, "aborted", False))


def _attributes(args: Any) -> dict[str, Any] | None:
    """A copy of `args`'s attributes, to tell a later call whether they changed (None: cannot tell)."""
    try:
        return dict(vars(args))
    except TypeError:  # no __dict__ (None, a slotted object): converted at every call
        return None


def _same(before: dict[str, Any] | None, now: dict[str, Any] | None) -> bool:
    """Whether two copies of args' attributes are equal (an attribute set, replaced or removed shows;
    a value changed in place does not: slime sets its args up before the first rollout)."""
    if before is None or now is None:
        return False
    try:
        return before == now
    except Exception:  # a value whose == is not a bool (an array): convert again
        return False


class _Wired:
    """Endpoints for one configuration, and one executor per distinct sampling dict."""

    def __init__(self, cfg: SlimeConfig, endpoints: Any):
        self.cfg = cfg
        self.endpoints = endpoints
        self.executors: dict[str, Executor] = {}
        self.args: dict[str, Any] | None = None  # the attributes of the args it was made from
        self.last: tuple[dict[str, Any], int | None, Executor] | None = None  # the last executor asked for


class SlimeTarget:
    """One per compiled module: the plan, and the per-process engines/tokenizers built from args."""

    def __init__(
        self,
        plan_path: str | Path,
        *,
        engine_factory: EngineFactory | None = None,
        tokenizer_loader: Callable[[str], Any] | None = None,
        sandbox: SandboxPolicy | None = None,
    ):
        self.plan_path = Path(plan_path)
        # the rollout process's GRAPHRL_SANDBOX / GRAPHRL_SANDBOX_STRICT, read once here at the edge
        self._sandbox = sandbox or SandboxPolicy.from_env(os.environ)
        # GRAPHRL_GC_THRESHOLD (opt-in, unset by default): the process's collector thresholds
        threshold = gc_threshold_from_env(os.environ)
        if threshold is not None:
            gc.set_threshold(*threshold)
        self._engine_factory = engine_factory or _sglang_engine
        self._tokenizer_loader = tokenizer_loader
        self._plan: Plan | None = None
        self._wired: _Wired | None = None
        self._abort = SlimeAbortFlag()

    # ------------------------------------------------------------------ boundary
    def plan(self, args: Any = None) -> Plan:
        if self._plan is None:
            path = getattr(args, "graphrl_plan_path", None) or self.plan_path
            self._plan = load_plan(path)
        return self._plan

    def _wire(self, args: Any) -> _Wired:
        seen = _attributes(args)
        if self._wired is not None and _same(self._wired.args, seen):
            return self._wired  # the args of the last call, unchanged: the same configuration
        plan = self.plan(args)
        cfg = from_args(args, plan)
        if self._wired is not None and self._wired.cfg == cfg:
            self._wired.args = seen
            return self._wired
        load = self._tokenizer_loader or load_tokenizer
        check_teacher_vocab(cfg, load)  # a teacher with its own tokenizer: the policy's vocabulary, or refused
        renderer = ChatRenderer(load(cfg.hf_checkpoint), vocab_size=embedding_rows(cfg.hf_checkpoint))
        renderers = {
            name: ChatRenderer(load(tok), vocab_size=embedding_rows(tok)) for name, tok in cfg.tokenizers.items()
        }
        engines = {name: self._engine_factory(name, url, cfg) for name, url in cfg.urls.items()}
        self._wired = _Wired(cfg, endpoints_for_plan(plan, engines, renderer, renderers=renderers))
        self._wired.args = seen
        return self._wired

    def _executor(self, wired: _Wired, sampling: dict[str, Any], context: int | None = None) -> Executor:
        last = wired.last
        if last is not None and last[0] == sampling and last[1] == context:
            return last[2]  # the last call's sampling and context: its executor (no key to build)
        key = json.dumps([sampling, context], sort_keys=True, default=str)
        ex = wired.executors.get(key)
        if ex is None:
            plan = self.plan()
            search = [Path(wired.cfg.source_dir or Path(plan.source.get("file", ".")).parent), self.plan_path.parent]
            ex = wired.executors[key] = Executor(
                plan,
                wired.endpoints,
                tools=ToolBox(search, sandbox=self._sandbox),
                rewards=RewardBox(search),
                sampling=sampling,
                max_context_tokens=context,
            )
        wired.last = (sampling, context, ex)
        return ex

    async def close(self) -> None:
        """Close the engines' HTTP sessions (slime never does: its rollout process lives for the run)."""
        if self._wired is not None:
            for ex in self._wired.executors.values():
                await ex.close()
            await self._wired.endpoints.close()

    # ------------------------------------------------------------------ generate
    async def generate(self, args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
        wired = self._wire(args)
        plan = self.plan(args)
        sampling = {k: copy.deepcopy(sampling_params[k]) for k in _SHARED_SAMPLING if k in sampling_params}
        _refuse_multimodal(sample)
        context = wired.cfg.eval_max_context_len if evaluation else wired.cfg.max_context_len
        executor = self._executor(wired, sampling, context)
        if fill.needs_reset(sample):
            fill.reset_to_prompt(sample)  # --partial-rollout: graphs restart from the prompt
        index = getattr(sample, "index", None)
        session = getattr(sample, "session_id", None) if not evaluation else None
        session = session or f"graphrl-{'eval' if evaluation else 'train'}-{index}-{uuid.uuid4().hex[:12]}"
        row = {
            "prompt": sample.prompt,
            "label": getattr(sample, "label", None),
            "metadata": dict(getattr(sample, "metadata", None) or {}),
        }
        pristine = copy.deepcopy(sample) if plan.training.fanout and not evaluation else None
        res = await executor.run(
            RolloutInput(
                row=row,
                rollout_id=index if index is not None else 0,
                group=getattr(sample, "group_index", None) or 0,
                seed=sampling_params.get("sampling_seed"),
                session_id=session,
            ),
            abort=self._abort,
        )
        teacher, lps = wired.cfg.teacher, None
        if teacher is not None and not evaluation:  # on-policy distillation (teacher.py)
            res, lps = await score_rollout(
                plan,
                res,
                teacher=teacher,
                engine=wired.endpoints.engine(teacher),
                semaphore=wired.endpoints.semaphore(teacher),
                temperature=float(sampling.get("temperature", 1.0)),
                session_id=session,
            )
        return self._to_slime(args, sample, pristine, res, wired, evaluation, lps)

    def _to_slime(
        self,
        args: Any,
        sample: Any,
        pristine: Any,
        res: RolloutResult,
        wired: _Wired,
        evaluation: bool,
        teacher_lps: TeacherLogProbs | None = None,
    ) -> Any:
        """Write the settled outcome (graphrl.runtime.outcome) into slime's Sample fields."""
        plan = self.plan()
        has_reward = plan.reward is not None
        eval_rm = self._eval_scorer(sample) if evaluation and has_reward else None
        slime_scores = not has_reward or eval_rm is not None
        outcome = settle(plan, res, evaluation=evaluation, scored_elsewhere=slime_scores)
        key = _reward_key(args, evaluation)
        raw = _as_float(self._reward_value(args, outcome.rollout_reward, evaluation), key) if has_reward else None
        renderer = wired.endpoints.renderer(POLICY)
        base = {
            "graph": plan.name,
            "rollout_id": res.rollout_id,
            "num_samples": len(res.samples),
            "status": outcome.status,
            "error": res.error,
            "credit": plan.reward.credit if plan.reward else None,
            "discount": plan.reward.discount if plan.reward else None,
            "evaluation": evaluation,
            "aborted_by": outcome.aborted_by,
        }
        if eval_rm is not None:
            base["eval_scorer"] = eval_rm  # who scores this eval sample instead of the graph's reward
        if has_reward:  # the uncredited reward post_process_rewards normalises (None: failed, counts as 0)
            base["rollout_reward"] = outcome.rollout_reward
            base["reward_detail"] = _jsonable(res.reward)  # e.g. the whole dict a reward returned
        # each call's JSON once: a sample's `calls` hold the same dicts as the rollout's (read-only records)
        call_json = {id(c): c.to_json() for c in res.calls}
        rollout_info = {
            "path": [list(p) for p in res.path],
            "rollout_calls": [call_json[id(c)] for c in res.calls],
            "usage": usage(list(res.calls)),
            "state": _jsonable(res.state),
        }
        if len(outcome.samples) > 1 and pristine is None:
            raise AssertionError(
                f"graph '{plan.name}' was compiled as one sample per rollout but yielded "
                f"{len(outcome.samples)}: recompile it with this graphrl"
            )
        # slime's ABORTED means "aborted by slime: generate it again" (fully_async_rollout requeues it,
        # --partial-rollout resumes it); a graph that routed to `abort` decided about its row, so that
        # rollout ends FAILED (terminal: kept out of the loss, never regenerated)
        final = outcome.aborted_by == "graph"

        def slime_status(status: str) -> str:
            return "failed" if final and status == "aborted" else status

        out = []
        fanout = pristine is not None
        for i, so in enumerate(outcome.samples):
            s = so.sample
            target = sample if i == 0 else copy.deepcopy(pristine)
            fill.write_tokens(target, s, args)
            if teacher_lps is not None:
                target.teacher_log_probs = teacher_lps.get(id(s), zeros(len(s.response_ids)))
            written = self._reward_value(args, so.reward, evaluation)
            info = dict(
                base,
                sample_index=s.index,
                written_reward=None if written is None else _as_float(written, key),
                spans=[sp.to_json() for sp in s.spans],
                calls=[call_json.get(id(c)) or c.to_json() for c in s.calls],
                **(rollout_info if i == 0 else {}),
            )
            if "own_reward" in s.metadata:  # a node reward: normalised per role, not a credit share
                # own_reward: what trains (combined with the rollout reward per reward.node_rewards);
                # node_reward: the node's score as it was
                own = None if so.reward is None else _as_float(so.reward, key)
                info.update(own_reward=own, node_reward=s.metadata["own_reward"], role=s.metadata["role"])
            out.append(
                fill.finish(
                    target,
                    status=slime_status(so.status),
                    reward=written,
                    remove=so.remove,
                    rollout_id=getattr(sample, "index", None),
                    response=renderer.decode(s.response_ids),
                    info=info,
                    raw_reward=raw if fanout else None,
                    rounds=len(s.calls),
                )
            )
        if outcome.placeholder is not None:
            pad = min(renderer.stop_token_ids) if renderer.stop_token_ids else 0
            fill.write_placeholder(sample, pad)
            if teacher_lps is not None:
                sample.teacher_log_probs = zeros(1)
            written = self._reward_value(args, outcome.placeholder.reward, evaluation)
            info = dict(
                base,
                sample_index=0,
                written_reward=None if written is None else _as_float(written, key),
                spans=[],
                calls=[],
                placeholder=True,
                **rollout_info,
            )
            out.append(
                fill.finish(
                    sample,
                    status=slime_status(outcome.placeholder.status),
                    reward=written,
                    remove=True,
                    rollout_id=getattr(sample, "index", None),
                    response="",
                    info=info,
                    raw_reward=raw if fanout else None,
                    rounds=0,
                )
            )
        fill.check_filled(out)
        if plan.training.fanout and not evaluation:
            return out
        return out[0] if len(out) == 1 else out

    def _eval_scorer(self, sample: Any) -> str | None:
        """Who scores an eval sample, when not the graph: slime's eval datasets copy their
        `custom_rm_path` (else --eval-custom-rm-path, else --custom-rm-path) onto each sample and
        put their `rm_type` into its metadata. An `rm_type` means slime's rule-based reward for that
        dataset; a `custom_rm_path` other than this module's reward_func means that function.
        None: the graph's reward, whole (eval means are per rollout)."""
        rm_type = (getattr(sample, "metadata", None) or {}).get("rm_type")
        if rm_type:
            return f"rm_type:{rm_type}"
        path = getattr(sample, "custom_rm_path", None)
        if path and path != f"{module_name(self.plan())}.reward_func":
            return str(path)
        return None

    def _reward_value(self, args: Any, credit: Any, evaluation: bool = False) -> Any:
        """A credit as slime reads it: a float, or {key: value} when slime has --reward-key (in eval,
        --eval-reward-key first: slime's eval indexes each reward with it)."""
        if credit is None:
            return None
        key = _reward_key(args, evaluation)
        if isinstance(credit, dict):
            if key is None:
                raise SlimeConfigError(
                    f"graph '{self.plan().name}' produced a dict reward {sorted(credit)} "
                    "without a key: set reward.key in the graph (and recompile)"
                )
            return dict(credit)
        return {key: float(credit)} if key else float(credit)

    def _zero(self, args: Any, evaluation: bool = False) -> Any:
        key = _reward_key(args, evaluation)
        return {key: 0.0} if key else 0.0

    # ------------------------------------------------------------------ rewards
    async def reward_func(self, args: Any, sample: Any, **kwargs: Any) -> Any:
        """The credited reward generate already computed, for one sample or a list of siblings."""
        if isinstance(sample, list):
            return [await self.reward_func(args, s, **kwargs) for s in sample]
        if sample.reward is not None:
            return sample.reward
        info = (getattr(sample, "metadata", None) or {}).get("graphrl")
        if info is None:
            raise ValueError(
                "this sample was not produced by a graphrl generate function: graphrl's reward_func "
                "only returns the reward its generate computed"
            )
        scorer = str(info.get("eval_scorer") or "")
        if scorer.startswith("rm_type:"):  # an eval dataset's rm_type: slime's rule-based reward scores it
            return await _slime_rule_reward(args, sample, scorer.removeprefix("rm_type:"))
        evaluation = bool(info.get("evaluation"))
        if info.get("status") not in ("completed", "truncated") or info.get("rollout_reward") is None:
            return self._zero(args, evaluation)
        if evaluation:  # eval: the rollout's whole reward, never a training credit
            return self._reward_value(args, float(info["rollout_reward"]), evaluation)
        if info.get("own_reward") is not None:  # a node reward: the sample's own
            return self._reward_value(args, float(info["own_reward"]))
        n = max(1, int(info.get("num_samples") or 1))
        weights = credit_weights(info.get("credit") or "even", n, float(info.get("discount") or 1.0))
        share = weights[min(max(int(info.get("sample_index") or 0), 0), n - 1)]
        return self._reward_value(args, float(info["rollout_reward"]) * share)

    # ------------------------------------------------------------------ logs
    def log_rollout(self, rollout_id: Any, args: Any, samples: list[Any], extra: Any, rollout_time: Any) -> bool:
        """slime's --custom-rollout-log-function-path: per-node metrics (metrics.py) join slime's own
        rollout metrics; False, so slime still logs everything else."""
        _log(args, rollout_id, node_metrics(list(samples)), extra, "rollout/step")
        return False

    def log_eval_rollout(self, rollout_id: Any, args: Any, data: Any, extra: Any) -> bool:
        """slime's --custom-eval-rollout-log-function-path: per-node metrics per eval dataset."""
        _log(args, rollout_id, eval_node_metrics(dict(data or {})), extra, "eval/step")
        return False

    def post_process_rewards(self, args: Any, samples: list[Any]) -> tuple[list[float], list[float]]:
        """Per prompt group: one reward per rollout (not per sample), group-normalised like GRPO, then
        credited to the rollout's samples (even: / n, broadcast: x 1). Returns (raw, normalised)."""
        return post_process(args, samples, self.plan(args))


def _log(args: Any, rollout_id: Any, metrics: dict[str, float], extra: Any, step_key: str) -> None:
    """Into slime's own log dict when it passes one (the extra metrics it logs next); otherwise through
    slime's logging (wandb / tensorboard) at the same step. Imported only then, inside slime."""
    if not metrics:
        return
    if isinstance(extra, dict):
        extra.update(metrics)
        return
    try:
        logging_utils = importlib.import_module("slime.observability.logging_utils")
        metric_utils = importlib.import_module("slime.observability.metric_utils")
    except ImportError:
        return
    logging_utils.log(
        args, {**metrics, step_key: metric_utils.compute_rollout_step(args, rollout_id)}, step_key=step_key
    )


def _refuse_multimodal(sample: Any) -> None:
    """Images/videos/audio on a sample (slime's multimodal_inputs): a graph renders text prompts from the
    row, so they would be dropped without a word; refused instead (an eval dataset's multimodal_keys
    can bring them in even when the training flags did not)."""
    media = getattr(sample, "multimodal_inputs", None) or {}
    kinds = sorted(k for k, v in media.items() if v is not None) if isinstance(media, dict) else []
    if kinds:
        raise SlimeConfigError(
            f"sample {getattr(sample, 'index', None)} carries multimodal inputs ({', '.join(kinds)}): graphrl "
            "graphs render text prompts only and would drop them. Remove --multimodal-keys (and an eval "
            "dataset's multimodal_keys)"
        )


async def _slime_rule_reward(args: Any, sample: Any, rm_type: str) -> Any:
    """slime's own rule-based reward (rm_hub.async_rm) for an eval dataset's rm_type. slime routes the
    sample here because this module is its custom_rm_path; the call goes back to slime with no
    custom path, so slime's rm_type branch scores it. Imported only then (inside slime's process)."""
    try:
        rm_hub = importlib.import_module("slime.rollout.rm_hub")
    except ImportError as exc:
        raise SlimeConfigError(
            f"an eval dataset asks for rm_type '{rm_type}' (slime's rule-based reward), but slime's "
            f"rm_hub cannot be imported here: {exc}"
        ) from None
    plain_args = copy.copy(args)
    plain_args.custom_rm_path = None
    plain = copy.copy(sample)
    plain.custom_rm_path = None
    return await rm_hub.async_rm(plain_args, plain)


def _reward_key(args: Any, evaluation: bool) -> str | None:
    """The key slime reads a reward with: --reward-key, or in eval --eval-reward-key first."""
    key = getattr(args, "eval_reward_key", None) if evaluation else None
    return key or getattr(args, "reward_key", None)


def _as_float(value: Any, key: str | None) -> float:
    if value is None:
        return 0.0
    if isinstance(value, dict):
        return float(value.get(key, 0.0)) if key else 0.0
    return float(value)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))
