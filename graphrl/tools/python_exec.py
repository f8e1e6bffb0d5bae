"""Sandboxed Python: code text -> observation (stdout + stderr), in a subprocess.

Input: code, a timeout, optional stdin. Output: `ToolResult` (ok = exit status 0 within time).

What it guarantees: a fresh temporary working directory (removed afterwards); a scrubbed
environment (no parent variables, no secrets); resource limits set before the code runs (CPU time,
address space, file size, number of processes, no core files); a new session whose whole process
group is killed on timeout; output read with a cap. What it does not: it is not a VM or a
container — the code runs as the same user, can read files that user can read, and has network
access unless the OS lets us drop it. docs/runtime.md says the same.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile

from ..runtime.services import ToolResult

OUTPUT_CAP = 1 << 20  # bytes read from the child at most
MEMORY_BYTES = 1 << 30
FILE_BYTES = 16 << 20
MAX_PROCS = 64


def _limits(cpu_seconds: int) -> None:  # runs in the child, before exec
    import resource

    for res, value in ((resource.RLIMIT_CPU, cpu_seconds), (resource.RLIMIT_AS, MEMORY_BYTES),
                       (resource.RLIMIT_FSIZE, FILE_BYTES), (resource.RLIMIT_CORE, 0),
                       (resource.RLIMIT_NPROC, MAX_PROCS)):
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError):
            pass


async def run_python(code: str, *, timeout: float = 30.0, stdin: str | None = None) -> ToolResult:
    workdir = tempfile.mkdtemp(prefix="graphrl-py-")
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "PYTHONIOENCODING": "utf-8",
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    cpu = max(1, int(timeout) + 1)
    proc = None
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "main.py", cwd=workdir, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, preexec_fn=lambda: _limits(cpu))
        try:
            out, _ = await asyncio.wait_for(proc.communicate((stdin or "").encode()), timeout)
        except asyncio.TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            return ToolResult(f"[timed out after {timeout:g} s]", ok=False, error="timeout")
        text = out[:OUTPUT_CAP].decode("utf-8", errors="replace")
        if proc.returncode != 0:
            return ToolResult(text or f"[exit status {proc.returncode}]", ok=False,
                              error=f"exit status {proc.returncode}")
        return ToolResult(text)
    finally:
        if proc is not None and proc.returncode is None:
            _kill_group(proc.pid)
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
