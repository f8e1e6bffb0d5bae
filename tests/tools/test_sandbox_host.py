"""Sandbox host side: policy from the environment, backend choice, the leftover sweep, the seccomp
program's shape, the ToolBox's strict argument and `graphrl doctor`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from graphrl.cli import main as cli_main
from graphrl.tools import _sandbox_launcher as launcher
from graphrl.tools import sandbox_host
from graphrl.tools.registry import ToolBox
from graphrl.tools.sandbox_host import SandboxConfigError, SandboxPolicy

linux = pytest.mark.skipif(sys.platform != "linux", reason="namespaces, cgroups and seccomp are Linux")


def test_policy_from_env_reads_backend_and_strict():
    assert SandboxPolicy.from_env({}) == SandboxPolicy(warm=2)
    pol = SandboxPolicy.from_env({"GRAPHRL_SANDBOX": "launcher", "GRAPHRL_SANDBOX_STRICT": "1"})
    assert (pol.backend, pol.strict) == ("launcher", True)
    with pytest.raises(SandboxConfigError, match="unknown sandbox backend 'docker'"):
        SandboxPolicy.from_env({"GRAPHRL_SANDBOX": "docker"})
    with pytest.raises(SandboxConfigError, match="GRAPHRL_SANDBOX_STRICT='maybe'"):
        SandboxPolicy.from_env({"GRAPHRL_SANDBOX_STRICT": "maybe"})
    assert SandboxConfigError("x").exit_code == 2


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_sweep_removes_only_what_dead_processes_left(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(sandbox_host, "CGROUP_V1", {"pids": str(tmp_path / "cg")})
    monkeypatch.setattr(sandbox_host, "CGROUP_V2", str(tmp_path / "cg2"))
    dead, alive = _dead_pid(), os.getpid()
    stale = tmp_path / f"graphrl-py-{dead}-abc"
    live = tmp_path / f"graphrl-py-{alive}-def"
    other = tmp_path / "graphrl-py-notapid"
    for d in (stale, live, other):
        (d / "sub").mkdir(parents=True)
    stale_group = tmp_path / "cg" / "graphrl-sandbox" / f"{dead}-0123"
    live_group = tmp_path / "cg" / "graphrl-sandbox" / f"{alive}-4567"
    stale_group.mkdir(parents=True)
    live_group.mkdir(parents=True)
    removed = sandbox_host.sweep_leftovers()
    assert sorted(removed) == sorted([str(stale), str(stale_group)])
    assert live.exists() and other.exists() and live_group.exists()


def test_seccomp_program_shape():
    prog = launcher.seccomp_program("x86_64")
    assert prog is not None and len(prog) % 8 == 0
    ins = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    for i, (code, jt, jf, _k) in enumerate(ins):  # every jump lands inside the program
        if code & 0x07 == 0x05:
            assert i + 1 + max(jt, jf) < len(ins)
    assert ins[-1] == (0x06, 0, 0, 0x7FFF0000)  # falls through to allow
    assert launcher.seccomp_program("sparc") is None
    refused = {k for code, _jt, _jf, k in ins if code == 0x15} & {425, 248, 249, 250}
    assert refused == {425, 248, 249, 250}  # io_uring_setup, add_key, request_key, keyctl


@linux
def test_the_seccomp_program_decides_as_documented():
    """The program run against syscalls, in a child that installs it (no_new_privs first): what it
    refuses, with which errno, and that it lets the rest through."""
    code = r"""
import ctypes, errno, os, socket, sys
sys.path.insert(0, sys.argv[1])
import _sandbox_launcher as L
report = {"errors": []}
L._call("prctl", L.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
L._seccomp(report)
libc = ctypes.CDLL(None, use_errno=True)
def err(nr, *args):
    return 0 if libc.syscall(nr, *args) >= 0 else ctypes.get_errno()
try:
    socket.socket(socket.AF_UNIX)
    unix = 0
except OSError as exc:
    unix = exc.errno
socket.socket(socket.AF_INET).close()
a, b = socket.socketpair()
print(report.get("unix_sockets_blocked"), unix, err(250, 0, -4, 0), err(248, b"user", b"k", b"v", 1, -4),
      err(249, b"user", b"k", None, -4), err(425, 4, None))
"""
    import errno

    tools = str(Path(launcher.__file__).parent)
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers below are x86_64's")
    done = subprocess.run([sys.executable, "-I", "-c", code, tools], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    e = errno
    assert done.stdout.split() == ["True", str(e.EACCES)] + [str(e.EPERM)] * 4, done.stdout


@linux
def test_strict_argument_of_the_python_tool_turns_strict_mode_on(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    box = ToolBox(sandbox=SandboxPolicy(backend="launcher"))
    code = f"import os\nprint(os.path.exists({str(secret)!r}))"

    async def both():
        plain = await box.call("python", {"code": code}, timeout=5, max_chars=None)
        strict = await box.call("python", {"code": code, "strict": True}, timeout=5, max_chars=None)
        return plain, strict

    plain, strict = asyncio.run(both())
    assert plain.ok and plain.text.strip() == "True"
    if not strict.data["sandbox"].get("strict_root"):
        pytest.skip(f"no strict root here: {strict.data['sandbox'].get('errors')}")
    assert strict.ok and strict.text.strip() == "False"


@linux
def test_doctor_says_which_backend_and_guarantees(monkeypatch):
    monkeypatch.setenv("GRAPHRL_SANDBOX", "launcher")
    res = CliRunner().invoke(cli_main, ["doctor", "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["backend"] == "launcher" and "unix_sockets_blocked" in rep
    res = CliRunner().invoke(cli_main, ["doctor"])
    assert res.exit_code == 0 and "python sandbox: backend launcher" in res.output
    monkeypatch.setenv("GRAPHRL_SANDBOX", "docker")
    res = CliRunner().invoke(cli_main, ["doctor"])
    assert res.exit_code == 2 and "unknown sandbox backend 'docker'" in res.output


@linux
def test_doctor_by_default_reports_the_fork_server_where_it_works(monkeypatch):
    """`graphrl run` and slime read GRAPHRL_SANDBOX_WARM (default 2), so `auto` means the fork server
    where namespaces work: the doctor runs its trivial call the same way and says so."""
    monkeypatch.delenv("GRAPHRL_SANDBOX", raising=False)
    monkeypatch.delenv("GRAPHRL_SANDBOX_WARM", raising=False)
    if not sandbox_host.fork_works():
        pytest.skip("no namespaces here: auto is bubblewrap or the launcher")
    res = CliRunner().invoke(cli_main, ["doctor"])
    assert res.exit_code == 0, res.output
    assert "python sandbox: backend fork" in res.output
    assert "[yes] own IPC namespace" in res.output and "[yes] own pid namespace" in res.output
    monkeypatch.setenv("GRAPHRL_SANDBOX_WARM", "0")  # no warm sandboxes: every call cold, as before
    res = CliRunner().invoke(cli_main, ["doctor"])
    assert res.exit_code == 0 and "python sandbox: backend fork" not in res.output


def test_a_bad_sandbox_setting_stops_graphrl_run_with_exit_2(tmp_path):
    env = {**os.environ, "GRAPHRL_SANDBOX": "docker", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphrl",
            "run",
            str(repo / "graphs/hello.yaml"),
            "--data",
            str(repo / "data/math.jsonl"),
        ]
        + ["--out", str(tmp_path / "t.jsonl"), "--model", "tiny", "--limit", "1"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "unknown sandbox backend 'docker'" in done.stderr and "Traceback" not in done.stderr


@linux
@pytest.mark.skipif(
    os.geteuid() != 0
    or not os.access(sandbox_host.CGROUP_V1["pids"], os.W_OK)
    and not os.access(sandbox_host.CGROUP_V2, os.W_OK),
    reason="cgroups are made as root only",
)
def test_the_sweep_kills_what_outlived_a_dead_run_in_its_cgroup():
    dead = _dead_pid()
    groups = sandbox_host.make_cgroups(SandboxPolicy())
    assert groups, "root with a writable cgroup hierarchy makes the call's cgroups"
    named = []
    for group in groups:  # as if the dead process had made them
        path = os.path.join(os.path.dirname(group["path"]), f"{dead}-{os.path.basename(group['path'])}-x")
        os.rename(group["path"], path)
        named.append(path)
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for path in named:
            Path(path, "cgroup.procs").write_text(str(orphan.pid))
        removed = sandbox_host.sweep_leftovers()
        assert orphan.wait(5) == -9
        assert set(named) <= set(removed) and not any(os.path.exists(p) for p in named)
    finally:
        if orphan.poll() is None:
            orphan.kill()


def test_the_recycler_keeps_empty_work_directories_and_hands_out_cgroups_only_once_empty():
    """`Recycler`: a directory holding anything is refused (the caller removes it); cgroups a process
    is still in have it killed and are handed out again only once it has left; nothing past `keep`,
    nothing after close, and the limits as the policy wrote them."""
    recycler = sandbox_host.Recycler(SandboxPolicy(), keep=1)
    workdir, groups = recycler.take()
    Path(workdir, "left").write_text("x")  # a call without a private tmpfs wrote here
    lodger = None
    if groups:
        lodger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        Path(groups[0]["path"], "cgroup.procs").write_text(str(lodger.pid))
    try:
        assert recycler.give_back(workdir, groups) == (False, bool(groups))
        shutil.rmtree(workdir)
        if lodger is not None:
            assert lodger.wait(5) == -signal.SIGKILL  # the call is over: what is left in its cgroups goes
            for _ in range(100):  # and leaves the cgroup once reaped
                if sandbox_host.members(groups[0]["path"]) == []:
                    break
                time.sleep(0.01)
        second, again = recycler.take()
        assert second != workdir and again == groups  # a fresh directory; the same cgroups, now empty
        for group in groups:
            assert sandbox_host.members(group["path"]) == []
            limit = "pids.max" if group["kind"] in ("pids", "unified") else "memory.limit_in_bytes"
            policy = SandboxPolicy()
            assert Path(group["path"], limit).read_text().strip() == str(
                policy.max_procs if limit == "pids.max" else policy.memory_bytes
            )
        assert recycler.give_back(second, again) == (True, bool(groups))
        assert recycler.take() == (second, again)  # kept: the same ones again
        other, other_groups = recycler.take()  # nothing kept: fresh ones
        assert other != second and (not groups or other_groups != groups)
        recycler.give_back(second, again)
        assert recycler.give_back(other, other_groups) == (False, False)  # past keep=1
        for group in other_groups:
            sandbox_host.rmdir(group["path"])
        os.rmdir(other)
        recycler.close()
        assert not os.path.exists(second) and not any(os.path.exists(g["path"]) for g in groups)
        assert recycler.give_back(second, []) == (False, False)  # closed: keeps nothing
    finally:
        if lodger is not None and lodger.poll() is None:
            lodger.kill()
