"""`graphrl launch`: a graph -> a slime training job on a local Ray head, in one command.

Input: GRAPH, a slime checkout (--slime-dir), the policy checkpoint, the training data, the Megatron
model-args script name, extra slime flags after `--`.
Output: the compiled files in --out (default build/<graph name>); then, in order,

    ray start --head ...                 a local Ray head with the GPUs the job needs
    ray job submit ... -- python3 train.py ...   the command launch.sh holds (emit.train_command),
                                         its logs streamed here until the job ends
    ray stop                             always, once the job is over

Ctrl-C: `ray job stop <id>` (the job itself, not only the log stream), `ray stop`, exit 130.
`--dry-run`: compile, check, print the exact commands, start nothing.

Exit codes (graphrl/cli.py): 0 the job succeeded; 2 usage (bad flags, or slime flags this graph
cannot work with); 3 the graph has errors; 4 something to install or point at is missing: the slime
checkout (train.py), scripts/models/<NAME>.sh, the `ray` executable (pip install 'graphrl[ray]'),
graphrl in the job's Python; 130 interrupted; otherwise `ray job submit`'s status (1: the job failed).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from ...plan import Plan
from .config import flag_problems, module_name
from .emit import JOB_ADDRESS, needs_sglang_config, resolve, rollout_gpus, runtime_env, source_dir, train_command


@dataclass(frozen=True)
class Commands:
    preflight: list[str]  # the job's Python imports graphrl and the compiled module
    preflight_env: dict[str, str]
    start: list[str]
    submit: list[str]
    stop_job: list[str]
    stop: list[str]


class Missing(click.ClickException):
    """Something to install or point at is missing: exit 4 (cli.py's EXIT_MISSING_DEP), with the fix."""

    exit_code = 4

    def __init__(self, what: str, fix: str):
        super().__init__(f"{what}\n  fix: {fix}")


def read_model_args(slime_dir: Path, name: str) -> list[str]:
    """scripts/models/<name>.sh sourced by bash: its MODEL_ARGS array, word for word."""
    script = slime_dir / "scripts" / "models" / f"{name}.sh"
    if not script.is_file():
        names = sorted(p.stem for p in (slime_dir / "scripts" / "models").glob("*.sh"))
        from ...spec.diagnostics import did_you_mean

        hint = did_you_mean(name, names) or (f"available: {', '.join(names)}" if names else "")
        raise Missing(f"no model script {script}", "pass --model-args NAME for one of slime's scripts/models/"
                      f"NAME.sh{' (' + hint + ')' if hint else ''}")
    try:
        res = subprocess.run(["bash", "-c", 'set -e; source "$1"; printf "%s\\0" "${MODEL_ARGS[@]}"', "_",
                              str(script)], capture_output=True, text=True, cwd=slime_dir)
    except OSError as exc:
        raise Missing(f"cannot run bash to read {script}: {exc}", "install bash") from None
    if res.returncode != 0 or not res.stdout:
        raise click.UsageError(f"{script} did not define MODEL_ARGS: {res.stderr.strip() or 'empty'}")
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


def build_commands(plan: Plan, out: Path, *, slime_dir: Path, hf_checkpoint: str, ref_load: str, data: str,
                   model_arg_words: list[str], num_gpus: int, megatron_dir: str, python: str, ray: str,
                   extra: list[str], job_id: str) -> Commands:
    values = {"SLIME_DIR": str(slime_dir), "NUM_GPUS": str(num_gpus), "MODEL_ARGS": model_arg_words,
              "HF_CHECKPOINT": hf_checkpoint, "REF_LOAD": ref_load, "PROMPT_DATA": data}
    train = resolve(train_command(plan, out), values)
    train[0] = python
    ray_gpus = max(num_gpus, rollout_gpus(plan)) if needs_sglang_config(plan) else num_gpus
    env = runtime_env(megatron_dir, str(out), str(source_dir(plan)))
    pythonpath = os.pathsep.join([megatron_dir, str(out), str(source_dir(plan))])
    return Commands(
        preflight=[python, "-c", f"import graphrl.compilers.slime.adapter, {module_name(plan)}"],
        preflight_env={"PYTHONPATH": pythonpath},
        start=[ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--num-gpus", str(ray_gpus),
               "--disable-usage-stats"],
        submit=[ray, "job", "submit", f"--address={JOB_ADDRESS}", "--submission-id", job_id,
                f"--runtime-env-json={env}", "--", *train, *extra],
        stop_job=[ray, "job", "stop", f"--address={JOB_ADDRESS}", job_id],
        stop=[ray, "stop"],
    )


def _run(cmd: list[str], **kw) -> int:
    click.echo("+ " + shlex.join(cmd), err=True)
    return subprocess.run(cmd, **kw).returncode


def execute(cmds: Commands) -> int:
    """Start Ray, run the job with its logs streamed, always stop Ray; Ctrl-C stops the job first."""
    rc = _run(cmds.start)
    if rc != 0:
        raise click.ClickException(f"`ray start` failed (exit {rc}); is a Ray head already running? (ray stop)")
    proc = None
    try:
        click.echo("+ " + shlex.join(cmds.submit), err=True)
        proc = subprocess.Popen(cmds.submit)
        return proc.wait()
    except KeyboardInterrupt:
        click.echo("interrupted: stopping the slime job", err=True)
        _run(cmds.stop_job)
        if proc is not None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.terminate()
        return 130
    finally:
        _run(cmds.stop)


@click.command(name="launch", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("graph", type=click.Path(dir_okay=False))
@click.argument("slime_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SLIME_FLAGS...]")
@click.option("--slime-dir", required=True, type=click.Path(file_okay=False), help="A slime checkout (holds train.py).")
@click.option("--hf-checkpoint", required=True, type=click.Path(exists=True), help="The policy, a Hugging Face directory.")
@click.option("--data", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Training JSONL/parquet: prompt, label, metadata per row.")
@click.option("--model-args", default="qwen2.5-0.5B", show_default=True,
              help="slime's scripts/models/<NAME>.sh (Megatron's architecture flags).")
@click.option("--ref-load", type=click.Path(exists=True), help="Reference model (default: --hf-checkpoint).")
@click.option("--megatron-dir", default="/root/Megatron-LM", show_default=True, envvar="MEGATRON_DIR",
              help="Megatron-LM checkout, put on the job's PYTHONPATH.")
@click.option("--num-gpus", default=1, show_default=True, type=click.IntRange(1), help="GPUs for training (colocated).")
@click.option("--python", "python", default="python3", show_default=True, help="The job's Python (must import graphrl).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Compile into this directory [build/<name>].")
@click.option("--dry-run", is_flag=True, help="Compile and print the exact commands; start nothing.")
def launch_command(graph, slime_args, slime_dir, hf_checkpoint, data, model_args, ref_load, megatron_dir, num_gpus,
                   python, out_dir, dry_run):
    """Compile GRAPH and train it with slime on a local Ray head; Ctrl-C stops the job.

    Extra slime flags go after `--` and come last (they win over the recipe's defaults). Needs
    Ray (pip install 'graphrl[ray]') and graphrl importable by the job's Python.

    \b
    Example:
      graphrl launch graphs/hello.yaml --slime-dir /root/slime --hf-checkpoint /root/Qwen2.5-0.5B-Instruct \\
          --data train.jsonl --model-args qwen2.5-0.5B -- --num-rollout 100 --rollout-batch-size 8
      graphrl launch graphs/memagent.yaml --slime-dir /root/slime --hf-checkpoint ... --data d.jsonl --dry-run
    """
    from ...cli import _report
    from ..checks import check_file
    from ..lower import lower
    from ...spec.diagnostics import has_errors
    from .emit import write_slime_target

    g, diags = check_file(graph)
    if g is None or has_errors(diags):
        sys.exit(_report([(graph, diags)], False))
    plan = lower(g)
    problems = flag_problems(parse_flags(slime_args), plan)
    if problems:
        raise click.UsageError("these slime flags do not work with this graph:\n  - " + "\n  - ".join(problems))
    slime = Path(slime_dir).resolve()
    if not (slime / "train.py").is_file():
        raise Missing(f"no slime checkout at {slime} (train.py is missing)",
                      "git clone https://github.com/THUDM/slime, then pass --slime-dir with its path")
    words = read_model_args(slime, model_args)
    ray = shutil.which("ray")
    if ray is None and not dry_run:
        raise Missing("the `ray` executable is not on PATH (Ray is an optional extra of graphrl)",
                      "pip install 'graphrl[ray]'")
    out = Path(out_dir or Path("build") / plan.name).resolve()
    write_slime_target(plan, out)
    hf = str(Path(hf_checkpoint).resolve())
    cmds = build_commands(plan, out, slime_dir=slime, hf_checkpoint=hf, ref_load=str(Path(ref_load).resolve())
                          if ref_load else hf, data=str(Path(data).resolve()), model_arg_words=words,
                          num_gpus=num_gpus, megatron_dir=megatron_dir, python=python, ray=ray or "ray",
                          extra=list(slime_args), job_id=f"graphrl-{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    if dry_run:
        if ray is None:
            click.echo("warning: no `ray` on PATH (pip install 'graphrl[ray]'); a real launch would stop here",
                       err=True)
        click.echo(f"# compiled {graph} -> {out}")
        click.echo("# check: the job's Python imports graphrl and the compiled module")
        click.echo(shlex.join(["env", f"PYTHONPATH={cmds.preflight_env['PYTHONPATH']}", *cmds.preflight]))
        for cmd in (cmds.start, cmds.submit):
            click.echo(shlex.join(cmd))
        click.echo("# on Ctrl-C: " + shlex.join(cmds.stop_job) + "; then always: " + shlex.join(cmds.stop))
        return
    env = {**os.environ, **cmds.preflight_env}
    try:
        pre = subprocess.run(cmds.preflight, env=env, capture_output=True, text=True)
        why = (pre.stderr.strip().splitlines() or ["?"])[-1] if pre.returncode else ""
    except OSError as exc:
        why = str(exc)
    if why:
        raise Missing(f"the job's Python ({python}) cannot import graphrl and the compiled module: {why}",
                      f"{python} -m pip install graphrl (or pass --python with an interpreter that has it)")
    rc = execute(cmds)
    if rc == 130:
        sys.exit(130)
    if rc != 0:
        click.echo(f"error: the slime job did not succeed (ray job submit exited {rc}); its logs are above",
                   err=True)
        sys.exit(rc)
    click.echo(f"slime job {cmds.submit[cmds.submit.index('--submission-id') + 1]} finished")
