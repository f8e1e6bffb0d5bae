"""`graphrl launch`: compile a graph and train it with slime (see `graphrl.compilers.slime.launch`)."""

from __future__ import annotations

import shlex
import sys

import click

from ..app.slime_launch import Cluster, InvalidGraph, SlimeJobFailed, prepare, run_launch
from ..errors import UsageProblem
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
@click.option("--num-gpus", default=1, show_default=True, type=click.IntRange(1), help="Training GPUs per node.")
@click.option(
    "--nodes",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Training nodes (more than 1 needs --address).",
)
@click.option(
    "--rollout-gpus",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="GPUs for the rollout engines apart from training (slime without --colocate); 0: shared.",
)
@click.option(
    "--address",
    envvar="RAY_ADDRESS",
    help="An existing Ray cluster's job address (e.g. http://HEAD:8265) [RAY_ADDRESS]; nothing is started or stopped.",
)
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
    nodes,
    rollout_gpus,
    address,
    python,
    out_dir,
    dry_run,
):
    """Compile GRAPH and train it with slime: on a Ray head started here, or on an existing Ray
    cluster (--address / RAY_ADDRESS, several --nodes); Ctrl-C stops the job.

    Extra slime flags go after `--` and come last (they win over the recipe's defaults). Needs
    Ray (pip install 'graphrl[ray]') and graphrl importable by the job's Python. The same in Python:
    graphrl.app.slime_launch.launch_slime. A job that fails exits 6.

    \b
    Example:
      graphrl launch graphs/hello.yaml --slime-dir /root/slime --hf-checkpoint /root/Qwen2.5-0.5B-Instruct \\
          --data train.jsonl --model-args qwen2.5-0.5B -- --num-rollout 100 --rollout-batch-size 8
      graphrl launch graphs/memagent.yaml --slime-dir /root/slime --hf-checkpoint ... --data d.jsonl \\
          --address http://head:8265 --nodes 2 --num-gpus 8 --rollout-gpus 8 --dry-run
    """
    try:
        launch = prepare(
            graph,
            slime_dir=slime_dir,
            hf_checkpoint=hf_checkpoint,
            data=data,
            model_args=model_args,
            ref_load=ref_load,
            megatron_dir=megatron_dir,
            cluster=Cluster(address=address, nodes=nodes, gpus_per_node=num_gpus, rollout_gpus=rollout_gpus),
            python=python,
            out_dir=out_dir,
            slime_args=slime_args,
            require_ray=not dry_run,
        )
    except InvalidGraph as exc:
        sys.exit(print_report([(exc.path, exc.diagnostics)]))
    except UsageProblem as exc:
        raise click.UsageError(str(exc)) from None
    cmds = launch.commands
    if dry_run:
        for warning in launch.warnings:
            click.echo(f"warning: {warning}", err=True)
        click.echo(f"# compiled {graph} -> {launch.out}")
        if cmds.preflight:
            click.echo("# check: the job's Python imports graphrl and the compiled module")
            click.echo(shlex.join(["env", f"PYTHONPATH={cmds.preflight_env['PYTHONPATH']}", *cmds.preflight]))
        else:
            click.echo("# an existing Ray cluster: nothing is started or stopped; its Python must import graphrl")
        for cmd in (cmds.start, cmds.submit):
            if cmd:
                click.echo(shlex.join(cmd))
        after = "; then always: " + shlex.join(cmds.stop) if cmds.stop else ""
        click.echo("# on Ctrl-C: " + shlex.join(cmds.stop_job) + after)
        return
    try:
        run_launch(launch, python)
    except KeyboardInterrupt:
        sys.exit(130)
    except SlimeJobFailed as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    click.echo(f"slime job {launch.job_id} finished")
