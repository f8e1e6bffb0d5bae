"""Compile a graph and train it with slime in one call: the library behind `graphrl launch`.

Input: the graph file, a slime checkout, the policy checkpoint, the data, the Megatron model-args
script name, the cluster (`Cluster`: a local Ray head, or an existing cluster by address with
several nodes, GPUs per node, rollout GPUs apart from training GPUs), extra slime flags.
Output: `prepare` -> `Launch` (the compiled directory, the exact commands, the job id), starting
nothing; `run_launch` / `launch_slime` run it and return 0 when the job succeeded.

Errors (graphrl.errors exit codes): `InvalidGraph` 3 (with its diagnostics), `UsageProblem` 2
(slime flags this graph cannot work with, a cluster that does not add up), `Missing` 4 (slime
checkout, model script, `ray`, graphrl in the job's Python), `SlimeJobFailed` 6 (the job ran and
failed: its logs were streamed above), `KeyboardInterrupt` after stopping the job (the CLI: 130).

    from graphrl.app.slime_launch import Cluster, launch_slime
    launch_slime("graphs/hello.yaml", slime_dir="/root/slime", hf_checkpoint="/root/Qwen2.5-0.5B-Instruct",
                 data="train.jsonl", cluster=Cluster(address="http://head:8265", nodes=2, gpus_per_node=8),
                 slime_args=["--num-rollout", "100"])
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..compilers.checks import check_file
from ..compilers.lower import lower
from ..compilers.slime.config import flag_problems
from ..compilers.slime.emit import needs_sglang_config, rollout_gpus, write_slime_target
from ..compilers.slime.launch import Commands, Missing, build_commands, execute, parse_flags, read_model_args
from ..errors import EXIT_INVALID, EXIT_SLIME_JOB_FAILED, GraphrlError, UsageProblem
from ..spec.diagnostics import Diagnostic, has_errors

__all__ = ["Cluster", "InvalidGraph", "Launch", "SlimeJobFailed", "launch_slime", "prepare", "run_launch"]


class InvalidGraph(GraphrlError):
    """The graph has errors: exit 3; `diagnostics` says which (the CLI prints them)."""

    exit_code = EXIT_INVALID

    def __init__(self, path: str, diagnostics: Sequence[Diagnostic]):
        super().__init__(f"{path} has errors")
        self.path = path
        self.diagnostics = list(diagnostics)


class SlimeJobFailed(GraphrlError):
    """The slime job ran and did not succeed (`ray job submit` exited `status`): exit 6."""

    exit_code = EXIT_SLIME_JOB_FAILED

    def __init__(self, job_id: str, status: int):
        super().__init__(f"the slime job {job_id} did not succeed (ray job submit exited {status}); its logs are above")
        self.job_id = job_id
        self.status = status


@dataclass(frozen=True)
class Cluster:
    """Where the job runs. `address` None: a Ray head started here (one node, stopped afterwards);
    else an existing cluster's job address (`ray job submit --address`; nothing is started or
    stopped). `rollout_gpus` 0: rollout engines share the training GPUs (slime's --colocate); N:
    N GPUs of their own (--rollout-num-gpus N, no --colocate)."""

    address: str | None = None
    nodes: int = 1
    gpus_per_node: int = 1
    rollout_gpus: int = 0


@dataclass(frozen=True)
class Launch:
    out: Path
    commands: Commands
    job_id: str
    warnings: tuple[str, ...] = ()


def _cluster_problems(cluster: Cluster, served_gpus: int | None) -> list[str]:
    out = []
    if cluster.nodes < 1 or cluster.gpus_per_node < 1 or cluster.rollout_gpus < 0:
        out.append("--nodes and --num-gpus must be at least 1, --rollout-gpus at least 0")
    if cluster.address is None and cluster.nodes > 1:
        out.append(
            f"--nodes {cluster.nodes} needs an existing Ray cluster: pass --address (or set RAY_ADDRESS) "
            "with its job address, e.g. http://HEAD:8265; without it graphrl starts a one-node head here"
        )
    if served_gpus is not None and cluster.rollout_gpus not in (0, served_gpus):
        out.append(
            f"the graph's served models make slime's --rollout-num-gpus {served_gpus} (sglang_config.yaml's "
            f"total, which slime asserts): --rollout-gpus {cluster.rollout_gpus} cannot differ"
        )
    return out


def prepare(
    graph: str,
    *,
    slime_dir: str | Path,
    hf_checkpoint: str | Path,
    data: str | Path,
    model_args: str = "qwen2.5-0.5B",
    ref_load: str | Path | None = None,
    megatron_dir: str = "/root/Megatron-LM",
    cluster: Cluster = Cluster(),
    python: str = "python3",
    out_dir: str | Path | None = None,
    slime_args: Sequence[str] = (),
    require_ray: bool = True,
) -> Launch:
    """Check and compile GRAPH and build the exact commands; starts nothing."""
    g, diags = check_file(graph)
    if g is None or has_errors(diags):
        raise InvalidGraph(graph, diags)
    plan = lower(g)
    served = rollout_gpus(plan) if needs_sglang_config(plan) else None
    problems = flag_problems(parse_flags(tuple(slime_args)), plan) + _cluster_problems(cluster, served)
    if problems:
        raise UsageProblem("these slime flags or cluster settings do not work:\n  - " + "\n  - ".join(problems))
    slime = Path(slime_dir).resolve()
    if not (slime / "train.py").is_file():
        raise Missing(
            f"no slime checkout at {slime} (train.py is missing)",
            "git clone https://github.com/THUDM/slime, then pass --slime-dir with its path",
        )
    words = read_model_args(slime, model_args)
    ray = shutil.which("ray")
    warnings: tuple[str, ...] = ()
    if ray is None:
        if require_ray:
            raise Missing(
                "the `ray` executable is not on PATH (Ray is an optional extra of graphrl)",
                "pip install 'graphrl[ray]'",
            )
        warnings = ("no `ray` on PATH (pip install 'graphrl[ray]'); a real launch would stop here",)
    out = Path(out_dir or Path("build") / plan.name).resolve()
    write_slime_target(plan, out)
    hf = str(Path(hf_checkpoint).resolve())
    job_id = f"graphrl-{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmds = build_commands(
        plan,
        out,
        slime_dir=slime,
        hf_checkpoint=hf,
        ref_load=str(Path(ref_load).resolve()) if ref_load else hf,
        data=str(Path(data).resolve()),
        model_arg_words=words,
        num_gpus=cluster.gpus_per_node,
        nodes=cluster.nodes,
        rollout_gpus=cluster.rollout_gpus,
        address=cluster.address,
        megatron_dir=megatron_dir,
        python=python,
        ray=ray or "ray",
        extra=list(slime_args),
        job_id=job_id,
    )
    return Launch(out, cmds, job_id, warnings)


def run_launch(launch: Launch, python: str = "python3") -> int:
    """Check the job's Python (a local head only), run the job; 0, or SlimeJobFailed."""
    cmds = launch.commands
    if cmds.preflight:
        env = {**os.environ, **cmds.preflight_env}
        try:
            pre = subprocess.run(cmds.preflight, env=env, capture_output=True, text=True)
            why = (pre.stderr.strip().splitlines() or ["?"])[-1] if pre.returncode else ""
        except OSError as exc:
            why = str(exc)
        if why:
            raise Missing(
                f"the job's Python ({python}) cannot import graphrl and the compiled module: {why}",
                f"{python} -m pip install graphrl (or pass --python with an interpreter that has it)",
            )
    rc = execute(cmds)
    if rc == 130:
        raise KeyboardInterrupt
    if rc != 0:
        raise SlimeJobFailed(launch.job_id, rc)
    return 0


def launch_slime(graph: str, *, dry_run: bool = False, **kw) -> Launch:
    """`prepare` then, unless dry_run, `run_launch`: compile GRAPH and train it with slime."""
    launch = prepare(graph, require_ray=not dry_run, **kw)
    if not dry_run:
        run_launch(launch, kw.get("python", "python3"))
    return launch
