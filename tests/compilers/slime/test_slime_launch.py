"""`graphrl launch`: dry run, the exit-4 errors, and full runs against a fake `ray` executable.

The fake `ray` (written by the test) logs every invocation as a JSON line; `ray job submit` succeeds,
fails, or hangs until `ray job stop` kills it (what stopping a real job does to the log stream). A
fake slime checkout holds an empty train.py and a model script of the test's own.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from slime_testkit import REPO

from graphrl.cli import EXIT_MISSING_DEP, EXIT_USAGE, main
from graphrl.compilers.lower import plan_from_path
from graphrl.compilers.slime.emit import DEFAULT_TRAIN_ARGS, slime_flags
from graphrl.errors import EXIT_SLIME_JOB_FAILED

FAKE_RAY = """#!{python}
import json, os, signal, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_RAY_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["job", "submit"]:
    mode = os.environ.get("FAKE_RAY_SUBMIT", "ok")
    if mode == "hang":
        with open(os.environ["FAKE_RAY_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
        print("fake job running", flush=True)
        time.sleep(60)
        sys.exit(1)
    print("fake job logs: step 1", flush=True)
    sys.exit(1 if mode == "fail" else 0)
if args[:2] == ["job", "stop"]:
    pidfile = os.environ.get("FAKE_RAY_PIDFILE")
    if pidfile and os.path.exists(pidfile):
        os.kill(int(open(pidfile).read()), signal.SIGTERM)
sys.exit(0)
"""

MODEL_SCRIPT = """MODEL_ARGS=(
   --num-layers 2
   --hidden-size 64
   --normalization "RMSNorm"
)
"""


@pytest.fixture
def env(tmp_path):
    slime = tmp_path / "slime"
    (slime / "scripts" / "models").mkdir(parents=True)
    (slime / "train.py").write_text("")
    (slime / "scripts" / "models" / "qwen2.5-0.5B.sh").write_text(MODEL_SCRIPT)
    hf = tmp_path / "hf"
    hf.mkdir()
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1+1?", "label": "2"}\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(FAKE_RAY.format(python=sys.executable))
    ray.chmod(0o755)
    log = tmp_path / "ray.log"
    return {
        "slime": slime,
        "hf": hf,
        "data": data,
        "bin": bin_dir,
        "log": log,
        "tmp": tmp_path,
        "vars": {"FAKE_RAY_LOG": str(log), "FAKE_RAY_PIDFILE": str(tmp_path / "submit.pid")},
    }


def _no_ray_path() -> str:
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "ray").exists())


def _argv(env, graph="graphs/hello.yaml", *extra, out=None):
    return [
        "launch",
        graph,
        "--slime-dir",
        str(env["slime"]),
        "--hf-checkpoint",
        str(env["hf"]),
        "--data",
        str(env["data"]),
        "--out",
        str(out or env["tmp"] / "build"),
        *extra,
    ]


def _calls(env):
    return [json.loads(line) for line in env["log"].read_text().splitlines()] if env["log"].exists() else []


# Ctrl-C as a terminal sends it: a shell with job control starts a program with SIGINT's default
# action, but a test suite run from a non-interactive background job (`cmd &` in a script) inherits it
# ignored, and Python then keeps ignoring it. The child resets it before it execs the command.
_SIGINT_DEFAULT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])",
]


def _spawn(env, argv, submit="ok"):
    path = f"{env['bin']}{os.pathsep}{os.environ['PATH']}"
    return subprocess.Popen(
        [*_SIGINT_DEFAULT, sys.executable, "-m", "graphrl.cli", *argv],
        cwd=REPO,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env["vars"], "PATH": path, "FAKE_RAY_SUBMIT": submit},
    )


# ---------------------------------------------------------------------------------------- dry run
def test_dry_run_prints_the_exact_commands(env, monkeypatch):
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(main, _argv(env, "graphs/memagent.yaml", "--dry-run", "--", "--num-rollout", "10"))
    assert res.exit_code == 0, res.output
    lines = [line for line in res.stdout.splitlines() if not line.startswith("#")]
    preflight, start, submit = (shlex.split(line) for line in lines)
    assert preflight[-1] == "import graphrl.compilers.slime.adapter, graphrl_memagent"
    assert start[1:] == [
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--num-gpus",
        "1",
        "--disable-usage-stats",
    ]
    assert submit[1:3] == ["job", "submit"]
    runtime = json.loads(next(w for w in submit if w.startswith("--runtime-env-json=")).split("=", 1)[1])
    out = (env["tmp"] / "build").resolve()
    assert runtime["env_vars"]["PYTHONPATH"].split(":") == ["/root/Megatron-LM", str(out), str(REPO / "graphs")]
    train = submit[submit.index("--") + 1 :]
    assert train[:2] == ["python3", str(env["slime"].resolve() / "train.py")]
    assert train[train.index("--colocate") + 1 :][:5] == ["--num-layers", "2", "--hidden-size", "64", "--normalization"]
    plan, _ = plan_from_path("graphs/memagent.yaml")
    flags = slime_flags(plan, out)
    i = train.index(flags[0])
    assert train[i : i + len(flags)] == flags  # the same graph flags launch.sh holds
    j = train.index(DEFAULT_TRAIN_ARGS[0])
    assert tuple(train[j : j + len(DEFAULT_TRAIN_ARGS)]) == DEFAULT_TRAIN_ARGS
    assert train[-2:] == ["--num-rollout", "10"]  # extra flags last
    assert (out / "graphrl_memagent.py").exists() and (out / "launch.sh").exists()
    assert "ray job stop" in res.stdout and "ray stop" in res.stdout


def test_dry_run_without_ray_warns_but_succeeds(env, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATH", _no_ray_path())
    res = CliRunner().invoke(main, _argv(env, "graphs/hello.yaml", "--dry-run"))
    assert res.exit_code == 0 and "no `ray` on PATH" in res.stderr


# ---------------------------------------------------------------------------------------- exit 4 / 2 / 3
def test_missing_slime_checkout_exits_4(env, monkeypatch):
    monkeypatch.chdir(REPO)
    (env["slime"] / "train.py").unlink()
    res = CliRunner().invoke(main, _argv(env, "graphs/hello.yaml", "--dry-run"))
    assert res.exit_code == EXIT_MISSING_DEP and "no slime checkout" in res.stderr and "git clone" in res.stderr


def test_missing_model_script_exits_4_with_a_suggestion(env, monkeypatch):
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(main, _argv(env, "graphs/hello.yaml", "--model-args", "qwen2.5-05B", "--dry-run"))
    assert res.exit_code == EXIT_MISSING_DEP
    assert "qwen2.5-05B.sh" in res.stderr and "did you mean 'qwen2.5-0.5B'" in res.stderr


def test_missing_ray_exits_4(env, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATH", _no_ray_path())
    res = CliRunner().invoke(main, _argv(env, "graphs/hello.yaml"))
    assert res.exit_code == EXIT_MISSING_DEP and "pip install 'graphrl[ray]'" in res.stderr


def test_job_python_without_graphrl_exits_4(env):
    proc = _spawn(env, _argv(env, "graphs/hello.yaml", "--python", "/bin/false"))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_MISSING_DEP and "cannot import graphrl" in err
    assert _calls(env) == []  # nothing was started


def test_flags_a_fanout_graph_cannot_use_are_a_usage_error(env, monkeypatch):
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(
        main,
        _argv(env, "graphs/memagent.yaml", "--dry-run", "--", "--group-rm", "--dynamic-sampling-filter-path", "x.y"),
    )
    assert res.exit_code == EXIT_USAGE
    assert "--group-rm" in res.stderr and "--dynamic-sampling-filter-path" in res.stderr


def test_opd_with_a_teacher_server_is_a_usage_error_for_a_graph_with_a_reward(env, monkeypatch):
    monkeypatch.chdir(REPO)
    res = CliRunner().invoke(
        main, _argv(env, "graphs/memagent.yaml", "--dry-run", "--", "--use-opd", "--opd-type", "sglang")
    )
    assert res.exit_code == EXIT_USAGE and "--use-opd --opd-type sglang" in res.stderr
    assert "Traceback" not in res.stderr


def test_fully_async_rollout_is_a_usage_error_for_a_fanout_graph(env, monkeypatch):
    monkeypatch.chdir(REPO)
    flag = "slime.rollout.fully_async_rollout.generate_rollout_fully_async"
    res = CliRunner().invoke(
        main, _argv(env, "graphs/memagent.yaml", "--dry-run", "--", "--rollout-function-path", flag)
    )
    assert res.exit_code == EXIT_USAGE and "fully_async_rollout" in res.stderr


def test_graph_errors_exit_3(env, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nnodes: {}\n")
    res = CliRunner().invoke(main, _argv(env, str(bad), "--dry-run"))
    assert res.exit_code == 3


# ---------------------------------------------------------------------------------------- real runs (fake ray)
def test_launch_starts_ray_submits_and_stops(env):
    proc = _spawn(env, _argv(env, "graphs/hello.yaml", "--python", sys.executable, "--", "--lr", "2e-6"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    calls = _calls(env)
    assert [c[:2] for c in calls] == [["start", "--head"], ["job", "submit"], ["stop"]]
    assert "fake job logs: step 1" in out  # the job's logs are streamed
    assert calls[1][-2:] == ["--lr", "2e-6"] and sys.executable in calls[1]


def test_failed_job_still_stops_ray(env):
    proc = _spawn(env, _argv(env, "graphs/hello.yaml", "--python", sys.executable), submit="fail")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_SLIME_JOB_FAILED == 6 and "did not succeed" in err  # not 1 ("a bug")
    assert [c[:2] for c in _calls(env)][-1] == ["stop"]


def test_ctrl_c_stops_the_job_then_ray(env):
    proc = _spawn(env, _argv(env, "graphs/hello.yaml", "--python", sys.executable), submit="hang")
    deadline = time.monotonic() + 120
    while not Path(env["vars"]["FAKE_RAY_PIDFILE"]).exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    calls = _calls(env)
    job_id = calls[1][calls[1].index("--submission-id") + 1]
    assert [c[:2] for c in calls] == [["start", "--head"], ["job", "submit"], ["job", "stop"], ["stop"]]
    assert calls[2][-1] == job_id  # the job itself is stopped, not just the log stream


def test_launch_sh_runs_the_same_command(env):
    """launch.sh (bash, variables) and graphrl launch (Python) submit the same slime command."""
    proc = _spawn(env, _argv(env, "graphs/memagent.yaml", "--python", sys.executable))
    proc.communicate(timeout=120)
    from_launch = _calls(env)[1]
    env["log"].unlink()
    script = env["tmp"] / "build" / "launch.sh"
    res = subprocess.run(
        ["bash", str(script)],
        cwd=env["tmp"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            **env["vars"],
            "PATH": f"{env['bin']}{os.pathsep}{os.environ['PATH']}",
            "SLIME_DIR": str(env["slime"].resolve()),
            "HF_CHECKPOINT": str(env["hf"].resolve()),
            "PROMPT_DATA": str(env["data"].resolve()),
        },
    )
    assert res.returncode == 0, res.stderr
    calls = _calls(env)
    from_script = calls[1]
    assert [c[:2] for c in calls] == [["start", "--head"], ["job", "submit"], ["job", "stop"], ["stop"]]

    def norm(cmd):
        cmd = list(cmd)
        cmd[cmd.index("--submission-id") + 1] = "<ID>"
        i = cmd.index("--")
        cmd[i + 1] = "<PYTHON>"
        return cmd

    assert norm(from_script) == norm(from_launch)


# ---------------------------------------------------------------------------------------- clusters (issue 14)
def _dry(env, *extra):
    res = CliRunner().invoke(main, _argv(env, "graphs/memagent.yaml", "--dry-run", *extra))
    lines = [line for line in res.stdout.splitlines() if not line.startswith("#")]
    return res, [shlex.split(line) for line in lines]


def test_dry_run_on_an_existing_two_node_cluster(env, monkeypatch):
    monkeypatch.chdir(REPO)
    res, cmds = _dry(env, "--address", "http://head:8265", "--nodes", "2", "--num-gpus", "8", "--rollout-gpus", "8")
    assert res.exit_code == 0, res.output
    (submit,) = cmds  # no `ray start` and no import check here: the cluster runs its own Python
    assert submit[1:4] == ["job", "submit", "--address=http://head:8265"]
    train = submit[submit.index("--") + 1 :]
    assert train[train.index("--actor-num-nodes") + 1] == "2"
    assert train[train.index("--actor-num-gpus-per-node") + 1] == "8"
    assert "--colocate" not in train and train[train.index("--rollout-num-gpus") + 1] == "8"
    assert "ray job stop --address=http://head:8265" in res.stdout and "ray stop" not in res.stdout


def test_ray_address_from_the_environment(env, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.5:8265")
    res, cmds = _dry(env)
    assert res.exit_code == 0 and cmds[0][3] == "--address=http://10.0.0.5:8265"


def test_several_nodes_without_a_cluster_and_rollout_gpus_a_served_model_fixes_are_usage_errors(env, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    res, _ = _dry(env, "--nodes", "2")
    assert res.exit_code == EXIT_USAGE and "--nodes 2 needs an existing Ray cluster" in res.stderr
    served = "tests/compilers/slime/graphs/fanout.yaml"  # its served helper: slime's --rollout-num-gpus is 3
    res = CliRunner().invoke(main, _argv(env, served, "--dry-run", "--address", "http://h:8265", "--rollout-gpus", "4"))
    assert res.exit_code == EXIT_USAGE and "--rollout-gpus 4 cannot differ" in res.stderr, res.output
    res = CliRunner().invoke(main, _argv(env, served, "--dry-run", "--address", "http://h:8265", "--rollout-gpus", "3"))
    assert res.exit_code == 0, res.output


def test_a_local_head_with_rollout_gpus_apart(env, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    res, (preflight, start, submit) = _dry(env, "--num-gpus", "2", "--rollout-gpus", "2")
    assert res.exit_code == 0 and start[start.index("--num-gpus") + 1] == "4"  # training + rollout GPUs
    assert "--colocate" not in submit


def test_job_on_an_existing_cluster_starts_and_stops_nothing_but_the_job(env):
    proc = _spawn(env, _argv(env, "graphs/hello.yaml", "--address", "http://head:8265"), submit="fail")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_SLIME_JOB_FAILED, err
    assert [c[:3] for c in _calls(env)] == [["job", "submit", "--address=http://head:8265"]]


def test_the_python_entry_point_compiles_and_builds_the_same_commands(env, monkeypatch, tmp_path):
    from graphrl.app.slime_launch import Cluster, launch_slime

    monkeypatch.chdir(REPO)
    launch = launch_slime(
        "graphs/hello.yaml",
        slime_dir=env["slime"],
        hf_checkpoint=env["hf"],
        data=env["data"],
        out_dir=tmp_path / "py",
        cluster=Cluster(address="http://head:8265", nodes=2, gpus_per_node=4),
        slime_args=["--num-rollout", "5"],
        dry_run=True,
    )
    train = launch.commands.submit[launch.commands.submit.index("--") + 1 :]
    assert (launch.out / "graphrl_hello.py").exists() and train[-2:] == ["--num-rollout", "5"]
    assert train[train.index("--actor-num-nodes") + 1] == "2" and launch.commands.start == []


def test_two_node_commands_parse_with_slimes_own_parser(env, monkeypatch):
    """When slime is importable: its argument parser accepts the train command graphrl builds."""
    import argparse
    import importlib.util

    from slime_testkit import import_stubbed

    try:  # (a bare `slime` may be this test directory, a namespace package)
        found = importlib.util.find_spec("slime.utils") is not None
    except ImportError:
        found = False
    if not found:
        pytest.skip("slime is not importable; put a THUDM/slime checkout on PYTHONPATH")
    get_slime_extra_args_provider = import_stubbed("slime.utils.arguments").get_slime_extra_args_provider
    monkeypatch.chdir(REPO)
    res, (submit,) = _dry(
        env, "--address", "http://head:8265", "--nodes", "2", "--num-gpus", "8", "--rollout-gpus", "4"
    )
    train = submit[submit.index("--") + 3 :]  # after python3 train.py
    parser = argparse.ArgumentParser()
    get_slime_extra_args_provider()(parser)
    args, _megatron = parser.parse_known_args(train)
    assert (args.actor_num_nodes, args.actor_num_gpus_per_node, args.rollout_num_gpus) == (2, 8, 4)
    assert args.colocate is False and args.custom_generate_function_path == "graphrl_memagent.generate"
    assert args.custom_rollout_log_function_path == "graphrl_memagent.log_rollout"


def test_a_graph_teacher_turns_opd_on_and_refuses_another_opd_type(env, monkeypatch):
    """A graph with slime.teacher: the command carries --use-opd --opd-type sglang (generate fills
    teacher_log_probs); --opd-type megatron after `--` would replace them: exit 2. With slime importable,
    its own parser reads the flags back."""
    import argparse
    import importlib.util

    monkeypatch.chdir(REPO)
    graph = "tests/compilers/slime/graphs/distill.yaml"
    res = CliRunner().invoke(main, _argv(env, graph, "--dry-run", "--", "--opd-type", "megatron"))
    assert res.exit_code == EXIT_USAGE and "slime.teacher 'teacher'" in res.stderr and "Traceback" not in res.stderr
    res = CliRunner().invoke(main, _argv(env, graph, "--dry-run", "--address", "http://head:8265"))
    assert res.exit_code == 0, res.output
    (submit,) = [shlex.split(line) for line in res.stdout.splitlines() if not line.startswith("#")]
    train = submit[submit.index("--") + 3 :]
    at = train.index("--use-opd")
    assert train[at : at + 3] == ["--use-opd", "--opd-type", "sglang"]
    try:
        found = importlib.util.find_spec("slime.utils") is not None
    except ImportError:
        found = False
    if found:
        from slime_testkit import import_stubbed

        parser = argparse.ArgumentParser()
        import_stubbed("slime.utils.arguments").get_slime_extra_args_provider()(parser)
        args, _megatron = parser.parse_known_args(train)
        assert (args.use_opd, args.opd_type, args.opd_teacher_load) == (True, "sglang", None)
