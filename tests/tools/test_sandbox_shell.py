"""The bubblewrap backend started through a waiting /bin/sh (`graphrl.tools.sandbox_shell`) is the
same sandbox as when started through the Python launcher: the same report, limits and fds, and a step
that fails is reported the same way; the shell starts nothing before the parent's "go". (The escape suite, tests/tools/test_sandbox_escape.py, runs every
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
    launch = sandbox_shell.prepare(cfg, "/bin/sh")
    for fd in launch.pass_fds:
        os.close(fd)
    assert [name for name, *_ in launch.limits] == ["cpu_s", "memory_bytes", "file_bytes", "core_bytes"]
    assert launch.limits[0][1:] == (resource.RLIMIT_CPU, 5, 6)
    assert launch.argv[launch.argv.index("--file") + 1] == str(launch.pass_fds[-1])
    assert launch.report["errors"] == ["rlimit processes: not allowed to raise maximum limit"]
    assert launch.report["pid_namespace"] is True


def test_the_parent_gives_the_waiting_shell_its_limits_and_the_shell_starts_nothing_before_go():
    """`start` sets the spawned shell's rlimits (prlimit on its pid) while it waits on stdin; only after
    "go" does it exec the command, which inherits them. Without "go" (stdin closed: a parent that died
    after the spawn) it exits 125 and runs nothing."""
    import subprocess

    show = [sys.executable, "-I", "-S", "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_FSIZE))"]
    launch = sandbox_shell.ShellLaunch(
        ["/bin/sh", "-c", sandbox_shell.SCRIPT, "sh", *show], (), {"errors": [], "rlimits": {}},
        [("file_bytes", resource.RLIMIT_FSIZE, 12345, 23456)],
    )  # fmt: skip
    kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    proc = subprocess.Popen(launch.argv, **kw)
    sandbox_shell.start(launch, proc.pid, {})
    out, err = proc.communicate(sandbox_shell.GO + b"the program's stdin", timeout=30)
    assert (proc.returncode, out, err) == (0, b"(12345, 23456)\n", b"ready\n")
    assert launch.report == {"errors": [], "rlimits": {"file_bytes": 12345}}
    for feed in (b"", b"no\n"):
        never = subprocess.Popen(launch.argv, **kw)
        out, err = never.communicate(feed, timeout=30)
        assert (never.returncode, out, err) == (125, b"", b"")


def test_a_shell_that_never_got_ready_is_a_failed_launcher():
    cfg = {"cgroups": [{"kind": "memory", "path": "/m"}], "max_procs": 64, "memory_bytes": 1 << 30}
    base = lambda: {"process_limit": None, "memory_limit": "rlimit-per-process:1", "rlimits": {}, "errors": []}
    assert sandbox_shell.finish_report(base(), cfg, b"")["launcher"] is False
    assert sandbox_shell.finish_report(base(), cfg, b"sh: 1: odd\n")["launcher"] is False
    done = sandbox_shell.finish_report(base(), cfg, b"sh: 3: odd\nready\n")
    assert done["errors"] == ["launcher: sh: 3: odd"]


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
    if way == "shell":  # the parent lowers the waiting shell's session (`sandbox_shell.start`), then says go
        argv = ["/bin/sh", "-c", sandbox_shell.SCRIPT, "sh", *show]
    else:
        code = "import sys; sys.path.insert(0, {!r}); import _sandbox_launcher as l; l.lower_priority(); {}"
        here = os.path.dirname(_sandbox_launcher.__file__)
        argv = [sys.executable, "-I", "-S", "-c", code.format(here, f"print(open({AUTOGROUP!r}).read())")]

    def run(new_session: bool) -> subprocess.CompletedProcess:
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=new_session
        )
        if way == "shell":
            sandbox_shell.start(sandbox_shell.ShellLaunch(argv, (), {"errors": [], "rlimits": {}}), proc.pid, {})
        out, err = proc.communicate(sandbox_shell.GO, timeout=30)
        return subprocess.CompletedProcess(argv, proc.returncode, out.decode(), err.decode())

    ours = open(AUTOGROUP).read()
    own = run(new_session=True)
    assert own.returncode == 0 and _nice_of(own.stdout) == str(_sandbox_launcher.AUTOGROUP_NICE), own
    try:
        shared = run(new_session=False)
        assert shared.returncode == 0 and shared.stdout.strip() == ours.strip(), shared  # the same one, unchanged
        assert open(AUTOGROUP).read() == ours
    finally:  # a failure here lowered this test run's own priority: put it back (best effort)
        if ours.strip() and open(AUTOGROUP).read() != ours:  # empty: the root task group, nothing to put back
            try:
                with open(AUTOGROUP, "w") as f:
                    f.write(_nice_of(ours))
            except OSError:
                pass
