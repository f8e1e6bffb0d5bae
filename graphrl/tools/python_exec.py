"""Sandboxed Python: code text -> observation (stdout + stderr), in an isolated subprocess.

Input: code, a timeout (wall clock), optional stdin. Output: `ToolResult`: ok = exit status 0 within
the time and the output cap; `text` = the combined output (cut at `OUTPUT_CAP` bytes); `data` =
{"exit_status": int | None, "sandbox": report}, the report saying which isolation steps held for
this very run (see `_sandbox_launcher.py` and docs/sandbox.md).

Always: a fresh temporary working directory, removed afterwards; a scrubbed environment (no
parent variable reaches the code); rlimits (CPU time, address space, file size, processes, no core
files); a new session whose whole process group is killed on timeout or when the output passes the
cap; output read in chunks, never more than the cap held in memory.
Where Linux allows (root, or unprivileged user namespaces): new network namespace (no network, not
even loopback), pid namespace (every descendant dies with the sandbox), mount namespace (a fresh
/proc, a minimal /dev, every file system read-only, the working directory a tmpfs of `disk_bytes`),
no capabilities, no_new_privs, a seccomp filter refusing unix-domain sockets; as root also a cgroup
per call (pids.max, and one memory limit for all the call's processes).
Backends (`sandbox_host.SandboxPolicy`): bubblewrap where it is installed and works, else the
hand-written launcher; strict mode swaps the host's file system for a minimal root.
Never: it is not a VM — same kernel; outside strict mode the code can read what the user can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import os
import shutil
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from ..runtime.services import ToolResult
from . import sandbox_shell
from .piped_process import PipedProcess, spawn
from .sandbox_host import (
    MEMORY_BYTES,
    Recycler,
    SandboxPolicy,
    bubblewrap_args,
    bubblewrap_works,
    bwrap_path,
    fork_works,
    kill_members,
    make_cgroups,
    make_workdir,
    remove_cgroup,
    resolve_backend,
    rmdir,
    strict_paths,
    strict_python,
)

OUTPUT_CAP = 1 << 20  # bytes of output kept; more kills the program
FILE_BYTES = 16 << 20  # largest file the code may write
LAUNCHER = Path(__file__).with_name("_sandbox_launcher.py")
# the launcher is imported by name (appended to the path, after the standard library) so that its
# bytecode cache is used: compiling it as a script took ~3 ms of every call's CPU
_RUN_LAUNCHER = (
    f"import sys; sys.path.append({str(LAUNCHER.parent)!r}); import _sandbox_launcher; _sandbox_launcher.main()"
)
__all__ = ["MEMORY_BYTES", "OUTPUT_CAP", "SandboxPolicy", "run_python"]
_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "PYTHONIOENCODING": "utf-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@dataclass
class Launched:
    """A sandboxed interpreter started by `launch`: its process, work directory, cgroups and the
    read end of the launcher's report pipe. `dispose` stops and removes all of it."""

    proc: PipedProcess  # a `piped_process.SpawnedProcess`, or a fork server's `ForkedProcess`
    workdir: str
    cgroups: list[dict[str, str]]
    report_r: int
    policy: SandboxPolicy
    report: dict | None = None
    # a shell launch (`sandbox_shell`): the report as the parent knows it, completed from the pipe
    shell: tuple[dict, dict] | None = None  # (report so far, config)
    # where the work directory and cgroups go back once the call is done (`sandbox_host.Recycler`)
    recycle: Recycler | None = None


async def launch(code: str, *, cpu_s: int, policy: SandboxPolicy, isolate: bool = True) -> Launched:
    """Start `code` as main.py in a fresh sandbox under `policy`; stdin and stdout are pipes
    (stderr joins stdout). The caller owns the result and must `dispose` it."""
    probes = {"auto": (fork_works, bubblewrap_works), "bubblewrap": (bubblewrap_works,)}.get(policy.backend, ())
    for probe in probes if isolate else ():
        if probe.cache_info().currsize == 0:
            await asyncio.to_thread(probe)  # the one-time probes, off the event loop
    backend = resolve_backend(policy) if isolate else "none"
    if backend == "fork":  # a call (or session) the fork server did not serve: started cold, as auto
        backend = resolve_backend(replace(policy, warm=0)) if policy.backend == "auto" else "launcher"
    workdir = make_workdir()
    cgroups = make_cgroups(policy) if isolate else []
    report_r, report_w = os.pipe()
    proc: PipedProcess | None = None
    try:
        Path(workdir, "main.py").write_text(code, encoding="utf-8")
        python = strict_python() if policy.strict and isolate else sys.executable
        cfg = call_config(backend, python, workdir, policy, cpu_s=cpu_s, cgroups=cgroups, script="main.py")
        cfg.update(strict=policy.strict and isolate, report_fd=report_w, parent_pid=os.getpid())
        env = cfg["env"]
        shell = None
        if backend == "bubblewrap":
            cfg["bwrap"] = bwrap_path()
            cfg["bwrap_args"], cfg["bwrap_claims"] = bubblewrap_args(workdir, env, policy, python)
            sh = sandbox_shell.available()
            if sh is not None:
                shell = sandbox_shell.prepare(cfg, sh)
        if shell is not None:  # sh, waiting for "go" -> bwrap: the shell's stderr is the report pipe
            try:
                proc = spawn(shell.argv, workdir, dict(_ENV), stderr=report_w, pass_fds=shell.pass_fds)
            finally:
                for fd in shell.pass_fds:
                    os.close(fd)
            started = proc
            await _off_loop(lambda: sandbox_shell.start(shell, started.pid, cfg), started, cgroups)  # then it may go on
            proc.send_now(sandbox_shell.GO)
            return Launched(proc, workdir, cgroups, report_r, policy, shell=(shell.report, cfg))
        argv = [sys.executable, "-I", "-S", "-c", _RUN_LAUNCHER, marshal.dumps(cfg).hex()]
        proc = spawn(argv, workdir, dict(_ENV), stderr=None, pass_fds=(report_w,))
    except BaseException:
        if proc is not None:
            if proc.returncode is None:
                await _stop(proc, cgroups)
            proc.close()
        os.close(report_r)
        shutil.rmtree(workdir, ignore_errors=True)
        for group in cgroups:
            await _remove_cgroup(group["path"])
        raise
    finally:
        os.close(report_w)
    return Launched(proc, workdir, cgroups, report_r, policy)


def call_config(
    backend: str, python: str, workdir: str, policy: SandboxPolicy, *, cpu_s: int, cgroups: list, script: str | None
) -> dict:
    """The launcher's configuration of one call (`_sandbox_launcher`), however it is started: `launch`
    adds the report fd and its parent's pid, the fork server sends it as it is."""
    return {
        "backend": backend,
        "python": python,
        "script": script,
        "workdir": workdir,
        "strict": policy.strict,
        "strict_paths": strict_paths() if policy.strict and backend in ("launcher", "fork") else [],
        "disk_bytes": policy.disk_bytes,
        "cpu_s": cpu_s,
        "memory_bytes": policy.memory_bytes,
        "file_bytes": FILE_BYTES,
        "max_procs": policy.max_procs,
        "cgroups": cgroups,
        "env": {**_ENV, "HOME": workdir, "TMPDIR": workdir},
    }


async def _off_loop(work: Callable[[], object], proc: PipedProcess, cgroups: list[dict[str, str]]) -> None:
    """Run `work` (the waiting shell's cgroups, priority and limits) in a thread: moving a process into
    a cgroup waits for the kernel (an RCU grace period, 5-20 ms on the development VM), which on the
    event loop stalled every rollout. Never cancelled half-way: a cancellation waits for it, then
    stops the shell and everything in the call's cgroups."""
    task = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        await _stop(proc, cgroups)
        raise


async def dispose(run: Launched) -> None:
    """Stop the process group if it still runs, then remove the work directory and cgroups."""
    try:
        if run.proc.returncode is None:
            await _stop(run.proc, run.cgroups)
    finally:
        if run.report_r >= 0:
            os.close(run.report_r)
            run.report_r = -1
        run.proc.close()  # our pipe ends, also of a program never used
        kept_dir, kept_groups = run.recycle.give_back(run.workdir, run.cgroups) if run.recycle else (False, False)
        if not kept_dir:
            shutil.rmtree(run.workdir, ignore_errors=True)
        for group in () if kept_groups else run.cgroups:
            await _remove_cgroup(group["path"])


async def await_report(run: Launched) -> dict:
    """Wait until the launcher has written its report -- end of file on the pipe, every write end
    closed, which it does before anything of the code runs -- and keep it on `run`."""
    if run.report is None and run.report_r >= 0:
        loop = asyncio.get_running_loop()
        fd, done = run.report_r, loop.create_future()
        chunks: list[bytes] = []
        os.set_blocking(fd, False)

        def readable() -> None:
            if _drain_fd(fd, chunks) and not done.done():
                done.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await done
        finally:
            loop.remove_reader(fd)
        run.report = _parse_report(run, b"".join(chunks))
    return read_report(run)


def read_report(run: Launched) -> dict:
    """The launcher's report (read once, when the program has started; kept on `run`)."""
    if run.report is None and run.report_r >= 0:
        run.report = _read_report(run)
    return run.report or {"launcher": False, "errors": ["no report"]}


class WarmSource(Protocol):
    """Where already-started sandboxes come from (`sandbox_pool.SandboxPool`): one running `WAITER`
    under `policy`, never used before, or None (then the call starts its own)."""

    async def take(self, policy: SandboxPolicy) -> Launched | None: ...

    def refill(self) -> None: ...


async def take_warm(warm: WarmSource, policy: SandboxPolicy, raw: bytes, cpu_s: int) -> tuple[Launched, bytes] | None:
    """A started sandbox from `warm` for the script `raw` (its UTF-8) under a CPU limit of `cpu_s`, and the
    bytes that start it (`WAITER`'s header and the script: the caller writes them to its stdin first,
    then whatever the program reads); None when none is ready (the caller starts one cold). The report
    already says `cpu_s`: the waiter lowers the limit to it before the script runs."""
    run = await warm.take(policy)
    if run is None:
        return None
    report = read_report(run)
    if "cpu_s" in report.get("rlimits", {}):
        report["rlimits"]["cpu_s"] = cpu_s
    return run, b"%d %d\n" % (cpu_s, len(raw)) + raw


async def run_python(
    code: str,
    *,
    timeout: float = 30.0,
    stdin: str | None = None,
    isolate: bool = True,
    policy: SandboxPolicy | None = None,
    warm: WarmSource | None = None,
) -> ToolResult:
    """Run `code` as a script under `policy` (default: auto backend, not strict); `isolate=False`
    skips the namespaces, cgroups and seccomp (rlimits and the rest still apply). With `warm`, a
    sandbox started ahead of time runs it when one is ready (the same guarantees; see `WAITER`)."""
    policy = policy or SandboxPolicy()
    cpu_s = max(1, int(timeout) + 1)
    feed = stdin.encode("utf-8") if stdin else b""
    raw = code.encode("utf-8")  # before a warm sandbox is taken: code that cannot be encoded fails here
    taken = await take_warm(warm, policy, raw, cpu_s) if warm is not None and isolate else None
    if taken is None:
        run = await launch(code, cpu_s=cpu_s, policy=policy, isolate=isolate)
    else:
        run, head = taken
        feed = head + feed
    proc = run.proc
    try:
        out, why = await proc.exchange(feed, OUTPUT_CAP, timeout)
        if why is not None:
            await _stop(proc, run.cgroups)
            return _cut_short(out, why, timeout, run)
        return _ended(out, proc.returncode, run)
    finally:
        await dispose(run)  # also when cancelled, or a bug above
        if warm is not None and isolate:
            warm.refill()  # replacements start once this call is done, not while it runs


def _cut_short(out: bytes, why: str, timeout: float, run: Launched) -> ToolResult:
    """The result of a program stopped for `why`: "timeout" or "output limit"."""
    note = (
        f"[timed out after {timeout:g} s]"
        if why == "timeout"
        else f"[output passed {OUTPUT_CAP} bytes: program stopped]"
    )
    return _result(out, note, why, None, run)


def _ended(out: bytes, rc: int | None, run: Launched) -> ToolResult:
    """The result of a program that exited by itself with status `rc`."""
    if rc != 0:
        return _result(
            out, f"[exit status {rc}{_signal_note(rc or 0)}]" if not out else "", f"exit status {rc}", rc, run
        )
    return _result(out, "", None, rc, run)


def _result(out: bytes, note: str, error: str | None, rc: int | None, run: Launched) -> ToolResult:
    text = out.decode("utf-8", errors="replace")
    if note and text and not text.endswith("\n"):
        text += "\n"
    text += note
    data = {"exit_status": rc, "sandbox": read_report(run)}
    return ToolResult(text, ok=error is None, error=error, data=data)


async def _stop(proc: PipedProcess, cgroups: list[dict[str, str]]) -> None:
    """Kill the process group and everything in the call's cgroups (what left the group: bwrap's inner
    process, code that escaped it) and wait for the exit; a process still there after 2 s (a kill
    that did not take) is closed, and so counts as finished."""
    stop = getattr(proc, "kill_sandbox", None)  # a fork server's call: killed through its pidfd
    if stop is not None:
        stop()
    else:
        _kill_group(proc.pid)
    for group in cgroups:
        kill_members(group["path"])
    try:
        await asyncio.wait_for(proc.wait(), 2.0)
    except asyncio.TimeoutError:
        proc.close()
        await proc.wait()


def _read_report(run: Launched) -> dict:
    os.set_blocking(run.report_r, False)
    chunks: list[bytes] = []
    _drain_fd(run.report_r, chunks)
    return _parse_report(run, b"".join(chunks))


def _drain_fd(fd: int, chunks: list[bytes]) -> bool:
    """Read what a non-blocking pipe holds into `chunks`; True at end of file (or an error)."""
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


def _parse_report(run: Launched, data: bytes) -> dict:
    if run.shell is not None:  # lines from the shell, completing what the parent knew
        return sandbox_shell.finish_report(*run.shell, data)
    try:  # written by the launcher (the same interpreter) before any of the code ran
        report = marshal.loads(data) if data else {"launcher": False, "errors": ["no report: the launcher failed"]}
    except (EOFError, ValueError, TypeError):
        report = None
    return report if isinstance(report, dict) else {"launcher": False, "errors": ["unreadable report"]}


def _signal_note(rc: int) -> str:
    if rc > 128:
        try:
            return f", killed by {signal.Signals(rc - 128).name}"
        except ValueError:
            return ""
    return ""


def _kill_group(pid: int) -> None:
    if pid <= 0:  # killpg(0) would be graphrl's own group
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _remove_cgroup(path: str) -> None:
    kill_members(path)  # a call that ended by itself may still have left something in it
    if not rmdir(path):  # killed processes still leaving (milliseconds): wait for them off the loop
        await asyncio.to_thread(remove_cgroup, path)
