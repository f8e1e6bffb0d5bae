"""The host side of the python sandbox: policy, backend choice, per-call cgroups, bubblewrap's arguments,
and the sweep of what a killed run left behind.

Input: a `SandboxPolicy` (from the caller, or `SandboxPolicy.from_env` at the edge). Output: the pieces
`python_exec.run_python` hands the launcher (`_sandbox_launcher.py`): a backend name, cgroup paths,
an argument list for `bwrap`, the read-only paths of a strict root.

Invariants: nothing here runs user code; a cgroup or work directory is named after the process that
made it (`<pid>-<random>`), so a later run removes only what a dead process left behind.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import UsageProblem

MEMORY_BYTES = 1 << 30  # address space per process, and all processes of one call together (cgroup)
DISK_BYTES = 64 << 20  # everything one call may write (its work directory is a tmpfs of this size)
MAX_PROCS = 64  # processes (and threads) at once
WARM_SANDBOXES = 2  # default GRAPHRL_SANDBOX_WARM
BACKENDS = ("auto", "fork", "bubblewrap", "launcher")
WORKDIR_PREFIX = "graphrl-py-"
CGROUP_V1 = {"pids": "/sys/fs/cgroup/pids", "memory": "/sys/fs/cgroup/memory"}
CGROUP_V2 = "/sys/fs/cgroup"


class SandboxConfigError(UsageProblem):
    """A sandbox setting that cannot be honoured (unknown backend, bubblewrap asked for but unusable): exit 2."""


@dataclass(frozen=True)
class SandboxPolicy:
    """How python tool calls are isolated. `backend`: auto (bubblewrap where it works, else the
    launcher), bubblewrap, or launcher. `strict`: a minimal root (interpreter, stdlib, libraries and
    the work directory; none of your files). Limits are per call."""

    backend: str = "auto"
    strict: bool = False
    memory_bytes: int = MEMORY_BYTES
    disk_bytes: int = DISK_BYTES
    max_procs: int = MAX_PROCS
    # sandboxes started ahead of time per event loop; 0 (the library default): every call starts its
    # own. `graphrl run` and the slime target read GRAPHRL_SANDBOX_WARM (default WARM_SANDBOXES).
    warm: int = 0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SandboxConfigError(f"unknown sandbox backend {self.backend!r}: use one of {', '.join(BACKENDS)}")

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> SandboxPolicy:
        """GRAPHRL_SANDBOX=auto|bubblewrap|launcher, GRAPHRL_SANDBOX_STRICT=1, GRAPHRL_SANDBOX_WARM=N
        (read once, at the edge)."""
        strict = env.get("GRAPHRL_SANDBOX_STRICT", "").strip().lower()
        if strict not in ("", "0", "1", "true", "false", "yes", "no"):
            raise SandboxConfigError(f"GRAPHRL_SANDBOX_STRICT={strict!r}: use 1 or 0")
        warm = env.get("GRAPHRL_SANDBOX_WARM", str(WARM_SANDBOXES)).strip()
        if not warm.isdecimal() or int(warm) > 256:
            raise SandboxConfigError(f"GRAPHRL_SANDBOX_WARM={warm!r}: use a number of sandboxes from 0 to 256")
        backend = env.get("GRAPHRL_SANDBOX", "auto").strip() or "auto"
        return cls(backend=backend, strict=strict in ("1", "true", "yes"), warm=int(warm))

    def with_strict(self, strict: bool) -> SandboxPolicy:
        return self if strict == self.strict else replace(self, strict=strict)


def resolve_backend(policy: SandboxPolicy) -> str:
    """The backend a call will use: the one asked for; for auto, the fork server when warm sandboxes
    are on and the launcher's namespaces work here, else bubblewrap where it works, else the launcher."""
    if policy.backend in ("launcher", "fork"):
        return policy.backend
    if policy.backend == "auto" and policy.warm > 0 and fork_works():
        return "fork"
    if bubblewrap_works():
        return "bubblewrap"
    if policy.backend == "bubblewrap":
        raise SandboxConfigError(
            "GRAPHRL_SANDBOX=bubblewrap but bwrap is not installed or cannot create namespaces here "
            "(install Debian's `bubblewrap`, or use GRAPHRL_SANDBOX=auto)"
        )
    return "launcher"


@cache
def bwrap_path() -> str | None:
    """`bwrap` on PATH, looked up once (a fact of the machine; a PATH search per call cost 0.12 ms)."""
    return shutil.which("bwrap")


@cache
def bubblewrap_works() -> bool:
    """Whether `bwrap` is on PATH and can make the namespaces we ask of it (a fact of the machine, probed once)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return False
    try:
        done = subprocess.run(
            [bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
            + ["--cap-drop", "ALL", "--", "/bin/true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


_FORK_PROBE = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "flags = 0x20000 | 0x20000000 | 0x40000000 | (0 if os.getuid() == 0 else 0x10000000)\n"
    "raise SystemExit(0 if libc.unshare(flags) == 0 else 1)\n"
)


@cache
def fork_works() -> bool:
    """Whether the launcher can make its mount, pid and network namespaces here (root, or unprivileged
    user namespaces): then `auto` with warm sandboxes uses the fork server. Probed once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _FORK_PROBE], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def strict_paths() -> list[tuple[str, str | None]]:
    """What a strict root holds, read-only: (path, None) to bind, (path, target) for a symlink.

    The base interpreter's prefix (stdlib, no virtualenv site-packages), /usr and the library
    directories the dynamic loader needs; nothing of /etc, /home, /root, /tmp, /run or /var."""
    wanted = ["/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"]
    wanted += [sys.base_prefix, str(Path(strict_python()).parent)]
    out: list[tuple[str, str | None]] = []
    for path in wanted:
        if not os.path.lexists(path) or any(path == p or path.startswith(p.rstrip("/") + "/") for p, _ in out):
            continue
        out.append((path, os.readlink(path) if os.path.islink(path) else None))
    return out


def strict_python() -> str:
    """The base interpreter (outside any virtualenv): what strict mode runs."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def bubblewrap_args(workdir: str, env: dict[str, str], policy: SandboxPolicy, python: str) -> tuple[list[str], dict]:
    """bwrap's argument list for one call (the launcher adds `--seccomp FD` and the script's fd), and
    the report entries those arguments guarantee."""
    # No --new-session: graphrl starts every sandbox in a session of its own (setsid, no controlling
    # terminal, `piped_process.spawn`), which is what bwrap's flag is for; a second session would be a
    # second scheduling autogroup, at the default weight (`_sandbox_launcher.lower_priority`).
    args = ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    if policy.strict:
        for path, link in strict_paths():
            args += ["--symlink", link, path] if link is not None else ["--ro-bind", path, path]
    else:
        args += ["--ro-bind", "/", "/"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(policy.disk_bytes), "--perms", "0700", "--tmpfs", workdir]
    args += ["--file", "{script_fd}", os.path.join(workdir, "main.py"), "--chdir", workdir]
    if policy.strict:
        args += ["--remount-ro", "/"]
    args += ["--", python, "-I", "main.py"]
    claims = {
        "user_namespace": True,
        "network_isolated": True,
        "pid_namespace": True,
        "ipc_namespace": True,  # --unshare-all: ipc and uts too
        "mount_namespace": True,
        "proc_private": True,
        "filesystem_readonly": True,
        "dev_minimal": True,
        "capabilities_dropped": True,
        "strict_root": policy.strict,
        "disk_limit": f"tmpfs:{policy.disk_bytes}",
    }
    return args, claims


# ---------------------------------------------------------------- work directories and cgroups


def make_workdir() -> str:
    return os.path.realpath(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))


def make_cgroups(policy: SandboxPolicy) -> list[dict[str, str]]:
    """Fresh cgroups for one call (root only): pids.max and a memory limit for all its processes.

    cgroup v1: one group in the pids and one in the memory hierarchy; v2: one group with both files.
    A hierarchy that is missing or not writable is left out (the report says what held)."""
    if os.geteuid() != 0:
        return []
    name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    groups: list[dict[str, str]] = []
    if os.path.isdir(CGROUP_V1["pids"]) or os.path.isdir(CGROUP_V1["memory"]):
        for kind, root in CGROUP_V1.items():
            limits = {"pids": {"pids.max": policy.max_procs}, "memory": {"memory.limit_in_bytes": policy.memory_bytes}}
            path = _cgroup(root, name, limits[kind])
            if path and kind == "memory":  # swap too, where swap accounting exists (best effort)
                _try_write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(policy.memory_bytes))
            if path:
                groups.append({"kind": kind, "path": path})
    elif os.path.exists(os.path.join(CGROUP_V2, "cgroup.controllers")):
        unified = {"pids.max": policy.max_procs, "memory.max": policy.memory_bytes, "memory.swap.max": 0}
        path = _cgroup(CGROUP_V2, name, unified, enable=("+pids", "+memory"))
        if path:
            groups.append({"kind": "unified", "path": path})
    return groups


def _cgroup(root: str, name: str, files: dict[str, Any], enable: tuple[str, ...] = ()) -> str | None:
    parent = os.path.join(root, "graphrl-sandbox")
    try:
        os.makedirs(parent, exist_ok=True)
        for ctl in enable:  # v2: the controllers must be enabled for the parent's children
            _try_write(os.path.join(root, "cgroup.subtree_control"), ctl)
            _try_write(os.path.join(parent, "cgroup.subtree_control"), ctl)
        path = os.path.join(parent, name)
        os.mkdir(path)
    except OSError:
        return None
    for file, value in files.items():
        if not _try_write(os.path.join(path, file), str(value)):
            rmdir(path)
            return None
    return path


def _try_write(path: str, text: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(text)
        return True
    except OSError:
        return False


class Recycler:
    """Work directories and cgroups of one policy, used again once a call has left them empty.

    Making and removing a call's cgroups (a mkdir, three limit files, a rmdir per hierarchy) and its
    work directory cost the rollout process about 0.44 ms of CPU per call on the development VM,
    more than a bare subprocess's whole start. `take()` hands out a kept set, or makes a fresh one;
    `give_back()` keeps a work directory with no entry (the call's files were on its own tmpfs, gone
    with its mount namespace) and the call's cgroups. A cgroup is handed out again only with no
    process in it and none counted in pids.current: one the call's processes are still leaving (a
    killed call's take a moment) has what is left killed and waits, and is taken once empty. A
    directory with anything in it is refused, and the caller removes it as before. The limits stay
    the policy's: a cgroup is only ever reused under the policy that wrote them. One call at a time
    per cgroup; at most `keep` kept of each; names keep their maker's pid, so the leftover sweep
    still finds them after a crash."""

    def __init__(self, policy: SandboxPolicy, keep: int = 256):
        self.policy = policy
        self.keep = keep
        self._dirs: list[str] = []
        self._groups: list[list[dict[str, str]]] = []  # empty when given back
        self._leaving: collections.deque[list[dict[str, str]]] = collections.deque()  # not yet empty
        self._closed = False

    def take(self) -> tuple[str, list[dict[str, str]]]:
        workdir = self._dirs.pop() if self._dirs else make_workdir()
        try:
            groups = self._groups.pop() if self._groups else self._emptied() or make_cgroups(self.policy)
        except BaseException:
            rmdir(workdir)
            raise
        return workdir, groups

    def _emptied(self) -> list[dict[str, str]] | None:
        """The oldest set of the leaving ones, once nothing is left in it (one still busy goes to the
        back, so that it never holds up the others)."""
        if self._leaving:
            if _vacant(self._leaving[0]):
                return self._leaving.popleft()
            self._leaving.rotate(-1)
        return None

    def give_back(self, workdir: str, groups: list[dict[str, str]]) -> tuple[bool, bool]:
        """(work directory kept, cgroups kept); what was not kept is the caller's to remove."""
        if self._closed:
            return False, False
        kept_dir = len(self._dirs) < self.keep and _empty_dir(workdir)
        if kept_dir:
            self._dirs.append(workdir)
        kept_groups = bool(groups) and len(self._groups) + len(self._leaving) < self.keep
        if kept_groups:
            if _vacant(groups):
                self._groups.append(groups)
            else:  # the call is over: whatever is still in its cgroups goes
                for group in groups:
                    kill_members(group["path"])
                self._leaving.append(groups)
        return kept_dir, kept_groups

    def close(self) -> None:
        """Remove everything kept (the leaving ones once empty, as `remove_cgroup` waits)."""
        self._closed = True
        for workdir in self._dirs:
            rmdir(workdir)
        for groups in self._groups:
            for group in groups:
                rmdir(group["path"])
        for groups in self._leaving:
            for group in groups:
                remove_cgroup(group["path"])
        self._dirs, self._groups, self._leaving = [], [], collections.deque()


def _vacant(groups: list[dict[str, str]]) -> bool:
    """No process in any of the groups, and none counted by the pids controller (a zombie not yet
    reaped is not in cgroup.procs but still counts against pids.max)."""
    for group in groups:
        if members(group["path"]) != []:
            return False
        if group["kind"] in ("pids", "unified"):
            try:
                with open(os.path.join(group["path"], "pids.current")) as f:
                    if f.read().strip() != "0":
                        return False
            except OSError:
                return False
    return True


def _empty_dir(path: str) -> bool:
    try:
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def sweep_leftovers() -> list[str]:
    """Remove work directories and cgroups whose owning process is gone (a SIGKILLed run's); returns them.

    Their processes died with that run (the parent-death signal), so almost always only empty cgroups
    and files remain; a process still in a dead run's cgroup outlived it and is killed first."""
    removed: list[str] = []
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        names = []
    for name in names:
        if name.startswith(WORKDIR_PREFIX) and _owner_gone(name[len(WORKDIR_PREFIX) :]):
            path = os.path.join(tmp, name)
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
    roots = [*CGROUP_V1.values(), CGROUP_V2]
    for root in roots:
        parent = os.path.join(root, "graphrl-sandbox")
        try:
            groups = os.listdir(parent)
        except OSError:
            continue
        for name in groups:
            path = os.path.join(parent, name)
            if os.path.isdir(path) and _owner_gone(name) and remove_cgroup(path):
                removed.append(path)
    return removed


def members(group: str) -> list[int] | None:
    """The processes in `group` (its cgroup.procs); None when it cannot be read."""
    try:
        with open(os.path.join(group, "cgroup.procs")) as f:
            return [int(line) for line in f if line.strip().isdecimal()]
    except OSError:
        return None


def kill_members(group: str) -> None:
    """SIGKILL every process in `group` (a call's cgroup: only that call's processes are in it)."""
    for pid in members(group) or ():
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def remove_cgroup(group: str) -> bool:
    """Kill what is still in a call's cgroup (in a dead run's: code that outlived it, started in the
    instant before bubblewrap's parent-death signal was set), then remove the group once it is empty."""
    kill_members(group)
    for _ in range(50):  # killed processes leave the cgroup once reaped (milliseconds)
        if rmdir(group):
            return True
        time.sleep(0.01)
    return False


def _owner_gone(name: str) -> bool:
    pid, sep, _ = name.partition("-")
    if not sep or not pid.isdecimal():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
