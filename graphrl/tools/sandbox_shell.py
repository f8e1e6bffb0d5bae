"""The bubblewrap backend's launch without a Python launcher process: /bin/sh, then prlimit, then bwrap.

Input: the call's launch config (the dict `python_exec.launch` builds for `_sandbox_launcher.py`).
Output: `ShellLaunch`: the argument list to spawn (stderr on the report pipe), the fds it must inherit,
and the report as far as the parent already knows it; `finish_report` completes it from what the
shell wrote.

Why: the Python launcher's own start (an interpreter, ctypes, the launcher module: about 14 ms of CPU
per call here) was a third of a sandboxed call's CPU, yet for bubblewrap it does only three things
before exec'ing `bwrap`: join the call's cgroups, set the rlimits, hand bwrap the seccomp program. Here
the parent prepares the seccomp pipe and the script's fd, `/bin/sh` joins the cgroups (its builtin
`echo` writing its pid to each `cgroup.procs`), reports each join on its stderr -- the report pipe --
and lowers its session's CPU weight (`_sandbox_launcher.lower_priority`) before pointing stderr at
stdout, and `prlimit` (util-linux) sets the same limits and execs bwrap with the argument list the
Python launcher would use. Same process (one pid from sh to bwrap), same order
(cgroups, priority, limits, bwrap), same report.

Invariants: the report pipe's only write end in the child is the shell's fd 2, closed (replaced by
stdout) before prlimit runs, so nothing of the sandbox can write to it; a limit the parent could not
raise is left out and reported, as the launcher's failed `setrlimit` is; `available()` is None (so the
Python launcher is used) where `/bin/sh` or `prlimit` is missing.
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass
from functools import cache

from . import _sandbox_launcher as launcher

# $1: the number of cgroups; then each cgroup.procs path; then the command (prlimit ... -- bwrap ...).
# The autogroup's nice is set only by a session leader (field 6 of /proc/self/stat is the session):
# in the caller's session it would lower the caller's own weight.
SCRIPT = (
    r"""n=$1; shift; i=0
while [ "$i" -lt "$n" ]; do
  if { echo $$ >"$1"; } 2>/dev/null; then echo "joined $i"; else echo "not joined $i"; fi >&2
  i=$((i + 1)); shift
done
{ read -r _ _ _ _ _ sid _ </proc/self/stat; } 2>/dev/null
if [ "$sid" = "$$" ]; then { echo %d >/proc/self/autogroup; } 2>/dev/null; fi
echo ready >&2
exec 2>&1
exec "$@"
"""
    % launcher.AUTOGROUP_NICE
)
PRLIMIT_OPTION = {
    "cpu_s": "--cpu",
    "memory_bytes": "--as",
    "file_bytes": "--fsize",
    "processes": "--nproc",
    "core_bytes": "--core",
}


@cache
def available() -> tuple[str, str] | None:
    """(sh, prlimit) when both are here (a fact of the machine, looked up once), else None."""
    sh, prlimit = shutil.which("sh", path="/bin:/usr/bin"), shutil.which("prlimit", path="/usr/bin:/bin")
    return (sh, prlimit) if sh and prlimit else None


@dataclass
class ShellLaunch:
    argv: list[str]
    pass_fds: tuple[int, ...]  # the seccomp program's pipe and the script, inherited by bwrap
    report: dict  # what holds once the shell has joined the cgroups (`finish_report`)


def prepare(cfg: dict, tools: tuple[str, str]) -> ShellLaunch:
    """The command line and fds for one bubblewrap call; the caller closes `pass_fds` after the spawn."""
    sh, prlimit = tools
    report = launcher.new_report("bubblewrap", cfg["memory_bytes"])
    limit_args, applied = [], {}
    root = os.geteuid() == 0
    for name, res, soft, hard in launcher.rlimit_values(cfg):
        current = resource.getrlimit(res)[1]
        if not root and current != resource.RLIM_INFINITY and hard > current:
            report["errors"].append(f"rlimit {name}: not allowed to raise maximum limit")
            continue
        limit_args.append(f"{PRLIMIT_OPTION[name]}={soft}:{hard}")
        applied[name] = soft
    report["rlimits"] = applied
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
    procs = [os.path.join(g["path"], "cgroup.procs") for g in cfg["cgroups"]]
    argv = [sh, "-c", SCRIPT, "sh", str(len(procs)), *procs, prlimit, *limit_args, "--", *bwrap]
    return ShellLaunch(argv, tuple(fds), report)


def finish_report(report: dict, cfg: dict, written: bytes) -> dict:
    """The report of a shell launch, from the parent's part and the lines the shell wrote
    ("joined I" / "not joined I" per cgroup, then "ready"); a shell that never got to "ready" failed."""
    lines = written.decode("utf-8", "replace").splitlines()
    if "ready" not in lines:
        return {"launcher": False, "errors": ["no report: the launcher failed", *lines[-3:]]}
    groups, errors = cfg["cgroups"], []
    for line in lines:
        verb, _, index = line.rpartition(" ")
        if verb in ("joined", "not joined") and index.isdigit() and int(index) < len(groups):
            group = groups[int(index)]
            if verb == "joined":
                launcher.cgroup_joined(cfg, report, group)
            else:
                errors.append(f"{group['kind']} cgroup: could not join {group['path']}")
        elif line != "ready":
            errors.append(f"launcher: {line}")
    report["errors"][:0] = errors  # first, as the launcher joins the cgroups before anything else
    launcher.limits_applied({**cfg, "real_root": os.getuid() == 0}, report, report["rlimits"])
    return report
