"""The bubblewrap backend started through sh + prlimit (`graphrl.tools.sandbox_shell`) is the same
sandbox as when started through the Python launcher: the same report, limits and fds, and a step that
fails is reported the same way. (The escape suite, tests/tools/test_sandbox_escape.py, runs every
attempt against both.)"""

from __future__ import annotations

import asyncio
import os
import resource
import sys

import pytest

from graphrl.tools import python_exec, sandbox_shell
from graphrl.tools.python_exec import run_python
from graphrl.tools.sandbox_host import SandboxPolicy, bubblewrap_works

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not bubblewrap_works(), reason="bubblewrap works only on Linux where installed"
)
POLICY = SandboxPolicy(backend="bubblewrap")
PROBE = (
    "import os, resource\n"
    "names = ('CPU', 'AS', 'FSIZE', 'NPROC', 'CORE', 'NOFILE', 'STACK')\n"
    "print([resource.getrlimit(getattr(resource, 'RLIMIT_' + n)) for n in names])\n"
    "fds = sorted(int(fd) for fd in os.listdir('/proc/self/fd'))\n"
    "print([(fd, os.readlink(f'/proc/self/fd/{fd}').split(':')[0]) for fd in fds if os.path.exists(f'/proc/self/fd/{fd}')])\n"
    "print(os.getpid(), os.getppid(), os.getsid(0) == os.getpid())\n"
)


def _run(code: str, python_launcher: bool, monkeypatch, timeout: float = 5.0):
    with monkeypatch.context() as mp:
        if python_launcher:
            mp.setattr(sandbox_shell, "available", lambda: None)
        return asyncio.run(run_python(code, timeout=timeout, policy=POLICY))


def test_the_shell_launch_is_the_python_launchers_sandbox(monkeypatch):
    assert sandbox_shell.available() is not None
    shell, python = _run(PROBE, False, monkeypatch), _run(PROBE, True, monkeypatch)
    assert shell.ok and python.ok, (shell.text, python.text)
    assert shell.text == python.text  # limits, open fds (0-2 and the listing's own), pids, session
    assert "(0, 'pipe'), (1, 'pipe'), (2, 'pipe')" in shell.text
    assert shell.data["sandbox"] == python.data["sandbox"]
    assert shell.data["sandbox"]["unix_sockets_blocked"] and shell.data["sandbox"]["rlimits"]["processes"] == 64


def test_a_cgroup_that_cannot_be_joined_is_reported_and_the_call_still_runs(monkeypatch, tmp_path):
    missing = str(tmp_path / "no-such-cgroup")
    monkeypatch.setattr(python_exec, "make_cgroups", lambda policy: [{"kind": "pids", "path": missing}])
    shell, python = _run("print('ran')", False, monkeypatch), _run("print('ran')", True, monkeypatch)
    assert shell.text == python.text == "ran\n"
    assert shell.data["sandbox"]["errors"] == [f"pids cgroup: could not join {missing}"]
    assert python.data["sandbox"]["errors"][0].startswith("pids cgroup: [Errno 2]")
    for res in (shell, python):
        assert res.data["sandbox"]["process_limit"] != "cgroup:64"


def test_a_limit_above_the_hard_limit_is_left_out_and_reported_when_not_root(monkeypatch, tmp_path):
    (tmp_path / "main.py").write_text("pass")
    real = resource.getrlimit
    monkeypatch.setattr(sandbox_shell.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(
        sandbox_shell.resource, "getrlimit", lambda res: (32, 32) if res == resource.RLIMIT_NPROC else real(res)
    )
    cfg = {
        "cpu_s": 5,
        "memory_bytes": 1 << 30,
        "file_bytes": 1 << 20,
        "max_procs": 64,
        "workdir": str(tmp_path),
        "script": "main.py",
        "bwrap": "/usr/bin/bwrap",
        "bwrap_args": ["--file", "{script_fd}", "/x/main.py", "--", "python"],
        "bwrap_claims": {"pid_namespace": True},
        "cgroups": [],
    }
    launch = sandbox_shell.prepare(cfg, ("/bin/sh", "/usr/bin/prlimit"))
    for fd in launch.pass_fds:
        os.close(fd)
    assert not any(a.startswith("--nproc") for a in launch.argv)
    assert "--cpu=5:6" in launch.argv and f"--as={1 << 30}:{1 << 30}" in launch.argv
    assert launch.argv[launch.argv.index("--file") + 1] == str(launch.pass_fds[-1])
    assert launch.report["errors"] == ["rlimit processes: not allowed to raise maximum limit"]
    assert "processes" not in launch.report["rlimits"] and launch.report["pid_namespace"] is True


def test_a_shell_that_never_got_ready_is_a_failed_launcher():
    cfg = {"cgroups": [{"kind": "memory", "path": "/m"}], "max_procs": 64, "memory_bytes": 1 << 30}
    base = lambda: {"process_limit": None, "memory_limit": "rlimit-per-process:1", "rlimits": {}, "errors": []}
    assert sandbox_shell.finish_report(base(), cfg, b"joined 0\n")["launcher"] is False
    done = sandbox_shell.finish_report(base(), cfg, b"joined 0\nsh: 3: odd\nready\n")
    assert done["memory_limit"] == f"cgroup:{1 << 30}" and done["errors"] == ["launcher: sh: 3: odd"]


AUTOGROUP = "/proc/self/autogroup"


def _nice_of(text: str) -> str:
    return text.split()[-1]


@pytest.mark.skipif(not os.path.exists(AUTOGROUP), reason="no scheduling autogroups on this kernel")
@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel lets a non-root process change an autogroup's nice "
                    "once per 100 ms machine-wide, so the priority is best effort there (docs/sandbox.md)")  # fmt: skip
@pytest.mark.parametrize("way", ["shell", "python launcher"])
def test_the_priority_is_lowered_in_the_calls_own_session_only(way):
    """In a session of its own (how graphrl starts every call) the call's autogroup gets nice 10; run
    in the caller's session it leaves the caller's autogroup alone (it would lower the caller)."""
    import subprocess

    from graphrl.tools import _sandbox_launcher

    show = [sys.executable, "-I", "-S", "-c", f"print(open({AUTOGROUP!r}).read())"]
    if way == "shell":
        argv = ["/bin/sh", "-c", sandbox_shell.SCRIPT, "sh", "0", *show]
    else:
        code = "import sys; sys.path.insert(0, {!r}); import _sandbox_launcher as l; l.lower_priority(); {}"
        here = os.path.dirname(_sandbox_launcher.__file__)
        argv = [sys.executable, "-I", "-S", "-c", code.format(here, f"print(open({AUTOGROUP!r}).read())")]
    ours = open(AUTOGROUP).read()
    own = subprocess.run(argv, capture_output=True, text=True, timeout=30, start_new_session=True)
    assert own.returncode == 0 and _nice_of(own.stdout) == str(_sandbox_launcher.AUTOGROUP_NICE), own
    try:
        shared = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert shared.returncode == 0 and shared.stdout.strip() == ours.strip(), shared  # the same one, unchanged
        assert open(AUTOGROUP).read() == ours
    finally:  # a failure here lowered this test run's own priority: put it back (best effort)
        if ours.strip() and open(AUTOGROUP).read() != ours:  # empty: the root task group, nothing to put back
            try:
                with open(AUTOGROUP, "w") as f:
                    f.write(_nice_of(ours))
            except OSError:
                pass
