"""`graphrl launch`: compile a graph and train it with slime (see `graphrl.compilers.slime.launch`)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

from ..compilers.checks import check_file
from ..compilers.lower import lower
from ..compilers.slime.config import flag_problems
from ..compilers.slime.emit import write_slime_target
from ..compilers.slime.launch import Missing, build_commands, execute, parse_flags, read_model_args
from ..spec.diagnostics import has_errors
from ._common import print_report


@click.command(name="launch", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("graph", type=click.Path(dir_okay=False))
@click.argument("slime_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SLIME_FLAGS...]")
@click.option("--slime-dir", required=True, type=click.Path(file_okay=False), help="A slime checkout (holds train.py).")
@click.option(
    "--hf-checkpoint", required=True, type=click.Path(exists=True), help="The policy, a Hugging Face directory."
)
@click.option(
    "--data",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Training JSONL/parquet: prompt, label, metadata per row.",
)
@click.option(
    "--model-args",
    default="qwen2.5-0.5B",
    show_default=True,
    help="slime's scripts/models/<NAME>.sh (Megatron's architecture flags).",
)
@click.option("--ref-load", type=click.Path(exists=True), help="Reference model (default: --hf-checkpoint).")
@click.option(
    "--megatron-dir",
    default="/root/Megatron-LM",
    show_default=True,
    envvar="MEGATRON_DIR",
    help="Megatron-LM checkout, put on the job's PYTHONPATH.",
)
@click.option("--num-gpus", default=1, show_default=True, type=click.IntRange(1), help="GPUs for training (colocated).")
@click.option(
    "--python", "python", default="python3", show_default=True, help="The job's Python (must import graphrl)."
)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Compile into this directory [build/<name>].")
@click.option("--dry-run", is_flag=True, help="Compile and print the exact commands; start nothing.")
def launch_command(
    graph,
    slime_args,
    slime_dir,
    hf_checkpoint,
    data,
    model_args,
    ref_load,
    megatron_dir,
    num_gpus,
    python,
    out_dir,
    dry_run,
):
    """Compile GRAPH and train it with slime on a local Ray head; Ctrl-C stops the job.

    Extra slime flags go after `--` and come last (they win over the recipe's defaults). Needs
    Ray (pip install 'graphrl[ray]') and graphrl importable by the job's Python.

    \b
    Example:
      graphrl launch graphs/hello.yaml --slime-dir /root/slime --hf-checkpoint /root/Qwen2.5-0.5B-Instruct \\
          --data train.jsonl --model-args qwen2.5-0.5B -- --num-rollout 100 --rollout-batch-size 8
      graphrl launch graphs/memagent.yaml --slime-dir /root/slime --hf-checkpoint ... --data d.jsonl --dry-run
    """
    g, diags = check_file(graph)
    if g is None or has_errors(diags):
        sys.exit(print_report([(graph, diags)]))
    plan = lower(g)
    problems = flag_problems(parse_flags(slime_args), plan)
    if problems:
        raise click.UsageError("these slime flags do not work with this graph:\n  - " + "\n  - ".join(problems))
    slime = Path(slime_dir).resolve()
    if not (slime / "train.py").is_file():
        raise Missing(
            f"no slime checkout at {slime} (train.py is missing)",
            "git clone https://github.com/THUDM/slime, then pass --slime-dir with its path",
        )
    words = read_model_args(slime, model_args)
    ray = shutil.which("ray")
    if ray is None and not dry_run:
        raise Missing(
            "the `ray` executable is not on PATH (Ray is an optional extra of graphrl)", "pip install 'graphrl[ray]'"
        )
    out = Path(out_dir or Path("build") / plan.name).resolve()
    write_slime_target(plan, out)
    hf = str(Path(hf_checkpoint).resolve())
    cmds = build_commands(
        plan,
        out,
        slime_dir=slime,
        hf_checkpoint=hf,
        ref_load=str(Path(ref_load).resolve()) if ref_load else hf,
        data=str(Path(data).resolve()),
        model_arg_words=words,
        num_gpus=num_gpus,
        megatron_dir=megatron_dir,
        python=python,
        ray=ray or "ray",
        extra=list(slime_args),
        job_id=f"graphrl-{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}",
    )
    if dry_run:
        if ray is None:
            click.echo(
                "warning: no `ray` on PATH (pip install 'graphrl[ray]'); a real launch would stop here", err=True
            )
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
        raise Missing(
            f"the job's Python ({python}) cannot import graphrl and the compiled module: {why}",
            f"{python} -m pip install graphrl (or pass --python with an interpreter that has it)",
        )
    rc = execute(cmds)
    if rc == 130:
        sys.exit(130)
    if rc != 0:
        click.echo(f"error: the slime job did not succeed (ray job submit exited {rc}); its logs are above", err=True)
        sys.exit(rc)
    click.echo(f"slime job {cmds.submit[cmds.submit.index('--submission-id') + 1]} finished")
