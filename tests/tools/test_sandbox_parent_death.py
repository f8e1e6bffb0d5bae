"""A SIGKILLed run takes its sandboxed code with it: the launcher dies with its parent, and the pid
namespace's init (dying too) kills everything the user code started; what it leaves on disk (its
work directory, its cgroups) is removed by the next run's sweep. Against every backend here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from graphrl.tools.sandbox_host import (
    CGROUP_V1,
    CGROUP_V2,
    WORKDIR_PREFIX,
    bubblewrap_works,
    fork_works,
    sweep_leftovers,
)

BWRAP = ["bubblewrap", "bubblewrap-python-launcher"]  # started through a waiting /bin/sh, or the Python launcher
_LINUX = sys.platform == "linux"
BACKENDS = (
    ["launcher"] + (["fork"] if _LINUX and fork_works() else []) + (BWRAP if _LINUX and bubblewrap_works() else [])
)
REPO = Path(__file__).resolve().parents[2]
TOKEN = "sleep_token_73154"


def _alive_with_token() -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:  # a process may exit between any two of these reads: then it is not alive
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd")
            if (
                b"main.py" in cmd
                and "graphrl-py-" in cwd
                and TOKEN in Path(f"/proc/{pid}/cwd/main.py").read_text(errors="replace")  # as the process sees it
            ):
                out.append(int(pid))
        except OSError:
            continue
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG and /proc are Linux")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_sandboxed_code_dies_with_the_run(tmp_path, sig, backend):
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio
        from graphrl.tools import sandbox_shell
        from graphrl.tools.python_exec import SandboxPolicy, run_python
        if {backend.endswith("-python-launcher")!r}:
            sandbox_shell.available = lambda: None
        code = "import os, time\\n# {TOKEN}\\n" \\
               "if os.fork() == 0:\\n    os.setsid()\\n    time.sleep(120)\\ntime.sleep(120)\\n"
        from graphrl.tools.sandbox_fork import run_once
        run = run_once if {backend!r} == "fork" else run_python
        asyncio.run(run(code, timeout=110, policy=SandboxPolicy(backend={backend.removesuffix("-python-launcher")!r})))
    """)
    )
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 60
        while not _alive_with_token():
            assert proc.poll() is None and time.monotonic() < deadline, "the sandboxed code never started"
            time.sleep(0.2)
        time.sleep(0.5)  # let the forked, setsid()-ed grandchild start too
        os.kill(proc.pid, sig)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while _alive_with_token() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive_with_token() == []
        # what the killed run left on disk is named after it, and the next run's sweep removes it
        left = [p for p in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}{proc.pid}-*")]
        groups = [
            p for root in (*CGROUP_V1.values(), CGROUP_V2) for p in Path(root, "graphrl-sandbox").glob(f"{proc.pid}-*")
        ]
        assert left, "the killed run's work directory should still be there before the sweep"
        removed: set[str] = set()
        deadline = time.monotonic() + 10  # a cgroup empties once the last killed process is reaped
        while not {str(p) for p in left + groups} <= removed and time.monotonic() < deadline:
            removed |= set(sweep_leftovers())
            time.sleep(0.2)
        assert {str(p) for p in left + groups} <= removed
        assert not any(p.exists() for p in left + groups)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _alive_with_token():
            os.kill(pid, signal.SIGKILL)
