"""Plan -> the files slime needs: plan.json, an importable module, args, sglang config, launch.sh, README.

Input: a `Plan` and an output directory. Output: the files below (deterministic text; paths inside
are absolute where slime's Ray job needs them, given as shell variables where the user chooses them).

  DIR/plan.json             the frozen plan
  DIR/graphrl_<name>.py     generate(args, sample, sampling_params, evaluation=False), reward_func,
                            post_process_rewards, log_rollout, log_eval_rollout — what slime's
                            dotted paths name
  DIR/slime_args.yaml       for --custom-config-path: graphrl_plan_path and graphrl's settings
  DIR/sglang_config.yaml    only when a frozen model declares serve: (slime serves it; the policy first)
  DIR/launch.sh             the complete slime command (docs/architecture.md, slime contract §5), variables marked
  DIR/README.md             what was generated and how to launch it

Invariant: `train_command(plan, out_dir)` is the one source of the slime command (graph-dependent
flags from `slime_flags`, the recipe's `DEFAULT_TRAIN_ARGS`); launch.sh renders it with shell
variables, `graphrl launch` substitutes their values (`resolve`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import yaml

from ...plan import Plan, plan_json
from ...spec.model import POLICY
from .config import module_name
from .settings import settings_of

__all__ = [
    "DEFAULT_TRAIN_ARGS",
    "Var",
    "module_name",
    "needs_sglang_config",
    "rollout_gpus",
    "slime_flags",
    "train_command",
    "runtime_env",
    "resolve",
    "source_dir",
    "write_slime_target",
    "JOB_ADDRESS",
]

JOB_ADDRESS = "http://127.0.0.1:8265"

# The recipe's training hyper-parameters (docs/architecture.md, slime contract §5); extra args given later win.
DEFAULT_TRAIN_ARGS = (
    "--num-rollout",
    "2",
    "--rollout-batch-size",
    "4",
    "--n-samples-per-prompt",
    "4",
    "--rollout-max-response-len",
    "1024",
    "--rollout-temperature",
    "1",
    "--global-batch-size",
    "16",
    "--advantage-estimator",
    "grpo",
    "--use-kl-loss",
    "--kl-loss-coef",
    "0",
    "--kl-loss-type",
    "low_var_kl",
    "--eps-clip",
    "0.2",
    "--eps-clip-high",
    "0.28",
    "--optimizer",
    "adam",
    "--lr",
    "1e-6",
    "--lr-decay-style",
    "constant",
    "--weight-decay",
    "0.1",
    "--adam-beta1",
    "0.9",
    "--adam-beta2",
    "0.98",
    "--use-dynamic-batch-size",
    "--max-tokens-per-gpu",
    "9216",
    "--rollout-num-gpus-per-engine",
    "1",
    "--sglang-mem-fraction-static",
    "0.5",
)


@dataclass(frozen=True)
class Var:
    """A value the user chooses: `"$NAME<suffix>"` in launch.sh; `"${NAME[@]}"` (many words) if splat."""

    name: str
    suffix: str = ""
    splat: bool = False

    def shell(self) -> str:
        return f'"${{{self.name}[@]}}"' if self.splat else f'"${self.name}{self.suffix}"'


Word = Union[str, Var]


def needs_sglang_config(plan: Plan) -> bool:
    return any(d.serve is not None for n, d in plan.models.items() if n != POLICY)


POLICY_ROLLOUT_GPUS = 1  # the policy's GPUs in the generated sglang_config.yaml (edit both together)


def rollout_gpus(plan: Plan) -> int:
    """--rollout-num-gpus with a generated sglang config: slime asserts it equals the config's total."""
    return POLICY_ROLLOUT_GPUS + sum(
        d.serve.num_gpus for n, d in plan.models.items() if n != POLICY and d.serve is not None
    )


def slime_flags(plan: Plan, out_dir: str | Path) -> list[str]:
    """The graph-dependent slime flags (custom functions, config paths, fan-out settings)."""
    out = Path(out_dir).resolve()
    mod = module_name(plan)
    flags = ["--custom-generate-function-path", f"{mod}.generate"]
    if plan.reward is not None:  # no reward in the graph: slime's own --rm-type scores the samples
        flags += ["--custom-rm-path", f"{mod}.reward_func"]
    flags += [
        "--custom-config-path",
        str(out / "slime_args.yaml"),
        "--input-key",
        "prompt",
        "--label-key",
        "label",
        "--metadata-key",
        "metadata",
    ]
    if plan.training.fanout or (plan.reward is not None and plan.reward.group is not None):
        flags += ["--custom-reward-post-process-path", f"{mod}.post_process_rewards"]
    flags += [  # per-node metrics next to slime's own (metrics.py)
        "--custom-rollout-log-function-path",
        f"{mod}.log_rollout",
        "--custom-eval-rollout-log-function-path",
        f"{mod}.log_eval_rollout",
    ]
    if settings_of(plan).teacher is not None:  # on-policy distillation: generate fills teacher_log_probs
        flags += ["--use-opd", "--opd-type", "sglang"]
    if needs_sglang_config(plan):
        flags += ["--sglang-config", str(out / "sglang_config.yaml"), "--rollout-num-gpus", str(rollout_gpus(plan))]
    return flags + list(settings_of(plan).extra_args)


def train_command(plan: Plan, out_dir: str | Path, *, nodes: int = 1, rollout_gpus: int = 0) -> list[Word]:
    """The Ray job's entrypoint: slime's train.py with every flag this graph needs. `rollout_gpus` 0:
    rollout engines share the training GPUs (--colocate); N: N GPUs of their own (--rollout-num-gpus)."""
    placement: list[Word] = ["--colocate"] if rollout_gpus == 0 else ["--rollout-num-gpus", str(rollout_gpus)]
    return [
        "python3",
        Var("SLIME_DIR", "/train.py"),
        "--actor-num-nodes",
        str(nodes),
        "--actor-num-gpus-per-node",
        Var("NUM_GPUS"),
        *placement,
        Var("MODEL_ARGS", splat=True),
        "--hf-checkpoint",
        Var("HF_CHECKPOINT"),
        "--ref-load",
        Var("REF_LOAD"),
        "--prompt-data",
        Var("PROMPT_DATA"),
        *slime_flags(plan, out_dir),
        *DEFAULT_TRAIN_ARGS,
    ]


def source_dir(plan: Plan) -> Path:
    """The graph file's directory (absolute): user tools, rewards and parsers are imported from it."""
    return Path(plan.source.get("file", ".")).resolve().parent


def runtime_env(megatron_dir: str, out_dir: str, graph_dir: str) -> str:
    """--runtime-env-json: Megatron, the compiled module's and the graph's directory on PYTHONPATH."""
    path = f"{megatron_dir}:{out_dir}:{graph_dir}"
    return json.dumps({"env_vars": {"PYTHONPATH": path, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}}, separators=(",", ":"))


def resolve(words: Sequence[Word], values: Mapping[str, str | Sequence[str]]) -> list[str]:
    """Substitute the user's values for the variables (a splat variable takes a list)."""
    out: list[str] = []
    for w in words:
        if isinstance(w, str):
            out.append(w)
        elif w.splat:
            out.extend(values[w.name])
        else:
            out.append(f"{values[w.name]}{w.suffix}")
    return out


MODULE = '''"""Generated by `graphrl compile` from {source} — do not edit; recompile instead.

slime calls these by dotted path; they run graph '{name}' (plan.json next to this file).
"""

from pathlib import Path

from graphrl.compilers.slime.adapter import SlimeTarget

_target = SlimeTarget(Path(__file__).with_name("plan.json"))


async def generate(args, sample, sampling_params, evaluation=False):
    return await _target.generate(args, sample, sampling_params, evaluation=evaluation)


async def reward_func(args, sample, **kwargs):
    return await _target.reward_func(args, sample, **kwargs)


def post_process_rewards(args, samples):
    return _target.post_process_rewards(args, samples)


def log_rollout(rollout_id, args, samples, rollout_extra_metrics, rollout_time):
    return _target.log_rollout(rollout_id, args, samples, rollout_extra_metrics, rollout_time)


def log_eval_rollout(rollout_id, args, data, extra_metrics):
    return _target.log_eval_rollout(rollout_id, args, data, extra_metrics)
'''


def _sglang_config(plan: Plan) -> str:
    models = [
        {
            "name": POLICY,
            "update_weights": True,
            "server_groups": [{"worker_type": "regular", "num_gpus": POLICY_ROLLOUT_GPUS}],
        }
    ]
    for name, d in sorted(plan.models.items()):
        if name != POLICY and d.serve is not None:
            models.append(
                {
                    "name": name,
                    "model_path": d.serve.model_path,
                    "update_weights": False,
                    "num_gpus_per_engine": d.serve.num_gpus_per_engine,
                    "server_groups": [{"worker_type": "regular", "num_gpus": d.serve.num_gpus}],
                }
            )
    head = (
        "# Generated by graphrl compile (slime --sglang-config). The policy comes first: slime points\n"
        "# sglang_router_ip at the first model; its model_path is --hf-checkpoint and only it gets\n"
        "# weight updates. Frozen models keep their graph names (graphrl finds them in\n"
        "# args.sglang_model_routers). slime asserts that the num_gpus below add up to --rollout-num-gpus\n"
        f"# ({rollout_gpus(plan)} in launch.sh): change both together.\n"
    )
    return head + yaml.safe_dump({"sglang": models}, sort_keys=False)


def _lines(words: Sequence[Word]) -> list[str]:
    """Shell words grouped as "--flag value" per line of launch.sh."""
    out: list[str] = []
    for w in words:
        text = w.shell() if isinstance(w, Var) else shlex.quote(w)
        value = isinstance(w, str) and not w.startswith("--") or isinstance(w, Var) and not w.splat
        if out and value and out[-1].startswith("--") and " " not in out[-1]:
            out[-1] += " " + text
        else:
            out.append(text)
    return out


def launch_script(plan: Plan, out_dir: str | Path) -> str:
    out = Path(out_dir).resolve()
    cmd = train_command(plan, out)
    head, flags = cmd[:2], cmd[2:]
    body = " \\\n  ".join(_lines(flags))
    gpus = (
        f"ROLLOUT_GPUS={rollout_gpus(plan)}                              # the total of sglang_config.yaml\n"
        "RAY_GPUS=$(( NUM_GPUS > ROLLOUT_GPUS ? NUM_GPUS : ROLLOUT_GPUS ))"
        if needs_sglang_config(plan)
        else 'RAY_GPUS="$NUM_GPUS"'
    )
    env = runtime_env("$MEGATRON_DIR", "$HERE", "$GRAPH_DIR").replace('"', '\\"')
    return f"""#!/usr/bin/env bash
# Generated by graphrl compile from {plan.source.get("file")} (plan sha256 {plan.source.get("sha256", "")[:12]}).
# The complete slime command for graph '{plan.name}' (`graphrl launch` runs the same one).
# Set the variables below (or export them); extra slime flags given to this script come last and win.
# The Ray job imports graphrl: install it in slime's Python environment (pip install graphrl).
set -euo pipefail
SLIME_DIR="${{SLIME_DIR:-/root/slime}}"                 # a slime checkout (train.py)
MEGATRON_DIR="${{MEGATRON_DIR:-/root/Megatron-LM}}"
MODEL_ARGS_SCRIPT="${{MODEL_ARGS_SCRIPT:-$SLIME_DIR/scripts/models/qwen2.5-0.5B.sh}}"
HF_CHECKPOINT="${{HF_CHECKPOINT:?set HF_CHECKPOINT to the policy checkpoint, a Hugging Face directory}}"
REF_LOAD="${{REF_LOAD:-$HF_CHECKPOINT}}"
PROMPT_DATA="${{PROMPT_DATA:?set PROMPT_DATA to the training JSONL (prompt, label, metadata)}}"
NUM_GPUS="${{NUM_GPUS:-1}}"
{gpus}
HERE={shlex.quote(str(out))}                            # the compiled module, plan.json, slime_args.yaml
GRAPH_DIR={shlex.quote(str(source_dir(plan)))}                   # user tools/rewards next to the graph
JOB_ID="graphrl-{plan.name}-$(date +%Y%m%d-%H%M%S)"

source "$MODEL_ARGS_SCRIPT"   # defines MODEL_ARGS
ray start --head --node-ip-address 127.0.0.1 --num-gpus "$RAY_GPUS" --disable-usage-stats
trap 'ray job stop --address={JOB_ADDRESS} "$JOB_ID" || true; ray stop || true' EXIT
ray job submit --address={JOB_ADDRESS} --submission-id "$JOB_ID" \\
  --runtime-env-json="{env}" \\
  -- {head[0]} {head[1].shell() if isinstance(head[1], Var) else shlex.quote(head[1])} \\
  {body} \\
  "$@"
"""


def readme(plan: Plan, out_dir: str | Path) -> str:
    mod = module_name(plan)
    out = Path(out_dir).resolve()
    src = plan.source.get("file")
    fan = (
        "yes: generate returns list[Sample] (siblings share rollout_id = sample.index, rewards credited "
        f"{plan.reward.credit if plan.reward else 'even'}); post_process_rewards normalises per prompt "
        "group counting each rollout once. Do not add --group-rm, --partial-rollout, "
        "--dynamic-sampling-filter-path or --log-passrate"
        if plan.training.fanout
        else "no (one sample per rollout)"
    )
    rows = [
        ("plan.json", "the frozen plan (templates inlined); the module runs exactly this"),
        (
            f"{mod}.py",
            f"`generate`, `reward_func`, `post_process_rewards` for slime's dotted paths (`{mod}.generate`, ...)",
        ),
        ("slime_args.yaml", "`--custom-config-path`: sets `args.graphrl_plan_path` and graphrl's request timeout"),
        (
            "launch.sh",
            "the complete slime command; set HF_CHECKPOINT, PROMPT_DATA, SLIME_DIR (+ MEGATRON_DIR, "
            "MODEL_ARGS_SCRIPT, NUM_GPUS)",
        ),
    ]
    if needs_sglang_config(plan):
        rows.append(
            (
                "sglang_config.yaml",
                "`--sglang-config`: slime serves the frozen models with serve: "
                "(policy first, update_weights only for the policy)",
            )
        )
    table = "\n".join(f"| {a} | {b} |" for a, b in rows)
    reward = (
        f"`{plan.reward.fn or 'terms: ' + ', '.join(plan.reward.terms or ())}` (credit {plan.reward.credit}), filled by generate"
        if plan.reward
        else "none in the graph: slime's reward model scores samples (pass --rm-type)"
    )
    return f"""# {plan.name} — compiled for slime

Generated by `graphrl compile {src} -o {out_dir}`. Recompile after editing the graph.

| file | what |
|---|---|
{table}

Trained nodes: {", ".join(plan.training.trained_nodes) or "none"}. Reward: {reward}.
Fan-out: {fan}.{_teacher_line(plan)}

Launch:

    HF_CHECKPOINT=/path/to/hf PROMPT_DATA=train.jsonl SLIME_DIR=/root/slime bash {out / "launch.sh"}

or `graphrl launch {src} --slime-dir /root/slime --hf-checkpoint ... --data train.jsonl`.
The Ray job needs graphrl importable in slime's Python (`pip install graphrl` in slime's image) and
this directory on PYTHONPATH (both commands set it). See docs/slime.md.
"""


def _teacher_line(plan: Plan) -> str:
    teacher = settings_of(plan).teacher
    if teacher is None:
        return ""
    return (
        f"\nOn-policy distillation: generate fills teacher_log_probs from model '{teacher}' (one scoring call "
        "per trained sample); the command has --use-opd --opd-type sglang (set --opd-kl-coef after --)."
    )


def write_slime_target(plan: Plan, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "plan.json": plan_json(plan),
        f"{module_name(plan)}.py": MODULE.format(source=plan.source.get("file"), name=plan.name),
        "slime_args.yaml": yaml.safe_dump(
            {
                "graphrl_plan_path": str((out / "plan.json").resolve()),
                "graphrl_source_dir": str(source_dir(plan)),
                "graphrl_request_timeout_s": 900.0,
            },
            sort_keys=True,
        ),
        "launch.sh": launch_script(plan, out),
        "README.md": readme(plan, out_dir),
    }
    if needs_sglang_config(plan):
        files["sglang_config.yaml"] = _sglang_config(plan)
    else:
        (out / "sglang_config.yaml").unlink(missing_ok=True)  # stale from an earlier compile
    written = []
    for name, text in files.items():
        path = out / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    (out / "launch.sh").chmod(0o755)
    return written
