"""`graphrl launch`: a graph -> a slime training job on a local Ray head or an existing Ray cluster.

Input: GRAPH, a slime checkout (--slime-dir), the policy checkpoint, the training data, the Megatron
model-args script name, extra slime flags after `--`.
Output: the compiled files in --out (default build/<graph name>); then, in order,

    ray start --head ...                 a local Ray head with the GPUs the job needs
    ray job submit ... -- python3 train.py ...   the command launch.sh holds (emit.train_command),
                                         its logs streamed here until the job ends
    ray stop                             always, once the job is over

With an existing cluster (`address`): no `ray start`, no `ray stop`, no local import check; the
job is submitted to that address. `nodes` / `rollout_gpus` become slime's --actor-num-nodes and
--colocate or --rollout-num-gpus (non-colocated).
Ctrl-C: `ray job stop <id>` (the job itself, not only the log stream), `ray stop`, exit 130.
`--dry-run`: compile, check, print the exact commands, start nothing.

Exit codes (graphrl.errors; the library entry point is graphrl.app.slime_launch): 0 the job
succeeded; 2 usage (bad flags, or slime flags this graph cannot work with); 3 the graph has errors;
4 something to install or point at is missing: the slime checkout (train.py),
scripts/models/<NAME>.sh, the `ray` executable (pip install 'graphrl[ray]'), graphrl in the job's
Python; 6 the job ran and failed; 130 interrupted.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import EXIT_MISSING_DEP, GraphrlError, UsageProblem
from ...plan import Plan
from ...spec.diagnostics import did_you_mean
from .config import module_name
from .emit import JOB_ADDRESS, needs_sglang_config, resolve, runtime_env, source_dir, train_command
from .emit import rollout_gpus as served_gpus


@dataclass(frozen=True)
class Commands:
    preflight: list[str]  # the job's Python imports graphrl and the compiled module
    preflight_env: dict[str, str]
    start: list[str]  # empty on an existing cluster
    submit: list[str]
    stop_job: list[str]
    stop: list[str]  # empty on an existing cluster


class Missing(GraphrlError):
    """Something to install or point at is missing: exit 4 (EXIT_MISSING_DEP), with the fix."""

    exit_code = EXIT_MISSING_DEP

    def __init__(self, what: str, fix: str):
        super().__init__(f"{what}\n  fix: {fix}")


def read_model_args(slime_dir: Path, name: str) -> list[str]:
    """scripts/models/<name>.sh sourced by bash: its MODEL_ARGS array, word for word."""
    script = slime_dir / "scripts" / "models" / f"{name}.sh"
    if not script.is_file():
        names = sorted(p.stem for p in (slime_dir / "scripts" / "models").glob("*.sh"))
        hint = did_you_mean(name, names) or (f"available: {', '.join(names)}" if names else "")
        raise Missing(
            f"no model script {script}",
            f"pass --model-args NAME for one of slime's scripts/models/NAME.sh{' (' + hint + ')' if hint else ''}",
        )
    try:
        res = subprocess.run(
            ["bash", "-c", 'set -e; source "$1"; printf "%s\\0" "${MODEL_ARGS[@]}"', "_", str(script)],
            capture_output=True,
            text=True,
            cwd=slime_dir,
        )
    except OSError as exc:
        raise Missing(f"cannot run bash to read {script}: {exc}", "install bash") from None
    if res.returncode != 0 or not res.stdout:
        raise UsageProblem(f"{script} did not define MODEL_ARGS: {res.stderr.strip() or 'empty'}")
    return res.stdout.split("\0")[:-1]


def parse_flags(words: tuple[str, ...] | list[str]) -> object:
    """Extra slime flags -> a namespace holding only those flags (for config.flag_problems)."""
    ns = type("SlimeFlags", (), {})()
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):
            name = w[2:].split("=", 1)[0].replace("-", "_")
            if "=" in w:
                setattr(ns, name, w.split("=", 1)[1])
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                setattr(ns, name, words[i + 1])
                i += 1
            else:
                setattr(ns, name, True)
        i += 1
    return ns


def build_commands(
    plan: Plan,
    out: Path,
    *,
    slime_dir: Path,
    hf_checkpoint: str,
    ref_load: str,
    data: str,
    model_arg_words: list[str],
    num_gpus: int,
    megatron_dir: str,
    nodes: int = 1,
    rollout_gpus: int = 0,
    address: str | None = None,
    python: str,
    ray: str,
    extra: list[str],
    job_id: str,
) -> Commands:
    values = {
        "SLIME_DIR": str(slime_dir),
        "NUM_GPUS": str(num_gpus),
        "MODEL_ARGS": model_arg_words,
        "HF_CHECKPOINT": hf_checkpoint,
        "REF_LOAD": ref_load,
        "PROMPT_DATA": data,
    }
    train = resolve(train_command(plan, out, nodes=nodes, rollout_gpus=rollout_gpus), values)
    train[0] = python
    if rollout_gpus:
        ray_gpus = num_gpus + rollout_gpus
    else:
        ray_gpus = max(num_gpus, served_gpus(plan)) if needs_sglang_config(plan) else num_gpus
    env = runtime_env(megatron_dir, str(out), str(source_dir(plan)))
    pythonpath = os.pathsep.join([megatron_dir, str(out), str(source_dir(plan))])
    job_address = address or JOB_ADDRESS
    local = address is None  # a head started here, stopped afterwards; else an existing cluster
    return Commands(
        preflight=[python, "-c", f"import graphrl.compilers.slime.adapter, {module_name(plan)}"] if local else [],
        preflight_env={"PYTHONPATH": pythonpath},
        start=[
            ray,
            "start",
            "--head",
            "--node-ip-address",
            "127.0.0.1",
            "--num-gpus",
            str(ray_gpus),
            "--disable-usage-stats",
        ]
        if local
        else [],
        submit=[
            ray,
            "job",
            "submit",
            f"--address={job_address}",
            "--submission-id",
            job_id,
            f"--runtime-env-json={env}",
            "--",
            *train,
            *extra,
        ],
        stop_job=[ray, "job", "stop", f"--address={job_address}", job_id],
        stop=[ray, "stop"] if local else [],
    )


def _run(cmd: list[str], **kw) -> int:
    print("+ " + shlex.join(cmd), file=sys.stderr, flush=True)
    return subprocess.run(cmd, **kw).returncode


def execute(cmds: Commands) -> int:
    """Start Ray (a local head), run the job with its logs streamed, always stop what was started;
    Ctrl-C stops the job first. With an existing cluster nothing is started or stopped but the job."""
    rc = _run(cmds.start) if cmds.start else 0
    if rc != 0:
        raise GraphrlError(f"`ray start` failed (exit {rc}); is a Ray head already running? (ray stop)")
    proc = None
    try:
        print("+ " + shlex.join(cmds.submit), file=sys.stderr, flush=True)
        proc = subprocess.Popen(cmds.submit)
        return proc.wait()
    except KeyboardInterrupt:
        print("interrupted: stopping the slime job", file=sys.stderr, flush=True)
        _run(cmds.stop_job)
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.terminate()
        return 130
    finally:
        if cmds.stop:
            _run(cmds.stop)
