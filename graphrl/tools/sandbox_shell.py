"""The bubblewrap backend's launch without a Python launcher process: /bin/sh waits, then becomes bwrap.

Input: the call's launch config (the dict `python_exec.launch` builds for `_sandbox_launcher.py`).
Output: `ShellLaunch`: the argument list to spawn (stderr on the report pipe), the fds it must inherit,
the report as far as the parent already knows it, and the limits and cgroups `start` gives the
spawned shell; `finish_report` completes the report from what the shell wrote.

Why: the Python launcher's own start (an interpreter, ctypes, the launcher module: about 14 ms of CPU
per call here) was a third of a sandboxed call's CPU, yet for bubblewrap it does only three things
before exec'ing `bwrap`: join the call's cgroups, set the rlimits, hand bwrap the seccomp program.
Here the parent prepares the seccomp pipe and the script's fd and spawns `/bin/sh` (in a session of
its own), which waits for one line on its stdin. Meanwhile `start` -- in the parent, right after the
spawn -- moves the shell into the call's cgroups (its pid into each `cgroup.procs`), sets its rlimits
(`prlimit(2)`) and lowers its session's CPU weight (`/proc/<pid>/autogroup`,
`_sandbox_launcher.lower_priority`), then writes "go". The shell reads it, says "ready" on its stderr
-- the report pipe --, points stderr at stdout and execs bwrap with the argument list the Python
launcher would use. Same process (one pid from sh to bwrap), same order (cgroups, priority, limits,
bwrap), same report. (Before commit 62bedcd the shell joined the cgroups itself and a
`prlimit` process set the limits: one exec more per call; docs/performance.md, the python tool's
CPU, part 3.)

Invariants: nothing of the sandbox exists before the limits and cgroups are in place (the shell
execs bwrap only after reading "go", which the parent writes only after `start`; a parent that dies
first closes the pipe, and the shell exits without starting anything); the report pipe's only write
end in the child is the shell's fd 2, closed (replaced by stdout) before bwrap runs, so nothing of
the sandbox can write to it; a limit the parent could not set is left out and reported, as the
launcher's failed `setrlimit` is; `available()` is None (so the Python launcher is used) where
`/bin/sh` is missing.
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass, field
from functools import cache

from . import _sandbox_launcher as launcher

GO = b"go\n"  # the parent's word that limits and cgroups are in place (`start`)
# stdin is read one byte at a time by `read` (a pipe cannot be sought back), so the shell takes
# exactly the line "go" and leaves the rest of stdin to the program.
SCRIPT = r"""IFS= read -r go && [ "$go" = go ] || exit 125
echo ready >&2
exec 2>&1
exec "$@"
"""


@cache
def available() -> str | None:
    """The shell when it is here (a fact of the machine, looked up once), else None."""
    return shutil.which("sh", path="/bin:/usr/bin")


@dataclass
class ShellLaunch:
    argv: list[str]
    pass_fds: tuple[int, ...]  # the seccomp program's pipe and the script, inherited by bwrap
    report: dict  # what holds once `start` has run; `finish_report` completes it
    limits: list[tuple[str, int, int, int]] = field(default_factory=list)  # (name, resource, soft, hard)


def prepare(cfg: dict, sh: str) -> ShellLaunch:
    """The command line and fds for one bubblewrap call; the caller closes `pass_fds` after the spawn
    and calls `start` with the shell's pid."""
    report = launcher.new_report("bubblewrap", cfg["memory_bytes"])
    limits = []
    root = os.geteuid() == 0
    for name, res, soft, hard in launcher.rlimit_values(cfg):
        current = resource.getrlimit(res)[1]
        if not root and current != resource.RLIM_INFINITY and hard > current:
            report["errors"].append(f"rlimit {name}: not allowed to raise maximum limit")
            continue
        limits.append((name, res, soft, hard))
    fds: list[int] = []
    bwrap = [cfg["bwrap"]]
    prog = launcher.seccomp_program()
    if prog is None:
        report["errors"].append(f"seccomp: no filter for {os.uname().machine}: unix sockets stay reachable")
    else:
        r, w = os.pipe()  # 144 bytes: within the pipe's buffer, so written before bwrap reads it
        os.write(w, prog)
        os.close(w)
        fds.append(r)
        bwrap += ["--seccomp", str(r)]
        report["unix_sockets_blocked"] = True
    try:
        script = os.open(os.path.join(cfg["workdir"], cfg["script"]), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    fds.append(script)
    bwrap += [str(script) if a == "{script_fd}" else a for a in cfg["bwrap_args"]]
    report.update(cfg["bwrap_claims"])
    argv = [sh, "-c", SCRIPT, "sh", *bwrap]
    return ShellLaunch(argv, tuple(fds), report, limits)


def start(shell: ShellLaunch, pid: int, cfg: dict) -> None:
    """Give the spawned, waiting shell `pid` its cgroups, rlimits and CPU weight, in the launcher's
    order, recording in `shell.report` what held; the caller then writes `GO` on its stdin."""
    errors = []
    for group in cfg.get("cgroups") or []:
        try:
            with open(os.path.join(group["path"], "cgroup.procs"), "w") as f:
                f.write(str(pid))
        except OSError:
            errors.append(f"{group['kind']} cgroup: could not join {group['path']}")
            continue
        launcher.cgroup_joined(cfg, shell.report, group)
    shell.report["errors"][:0] = errors  # first, as the launcher joins the cgroups before anything else
    launcher.lower_priority(pid)
    applied = {}
    for name, res, soft, hard in shell.limits:
        try:
            resource.prlimit(pid, res, (soft, hard))
            applied[name] = soft
        except (ValueError, OSError) as exc:
            shell.report["errors"].append(f"rlimit {name}: {exc}")
    shell.report["rlimits"] = applied


def finish_report(report: dict, cfg: dict, written: bytes) -> dict:
    """The report of a shell launch, from the parent's part and what the shell wrote ("ready" once it
    got "go"); a shell that never got to "ready" failed."""
    lines = written.decode("utf-8", "replace").splitlines()
    if "ready" not in lines:
        return {"launcher": False, "errors": ["no report: the launcher failed", *lines[-3:]]}
    report["errors"] += [f"launcher: {line}" for line in lines if line != "ready"]
    launcher.limits_applied({**cfg, "real_root": os.getuid() == 0}, report, report["rlimits"])
    return report
