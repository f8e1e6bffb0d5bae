"""Sandbox launcher: runs as the child of `run_python`, isolates itself, then execs the user's code.

Input: argv[1] = JSON config {python, script, workdir, cpu_s, memory_bytes, file_bytes, max_procs,
cgroup, report_fd}. Output: the user's program (stdout/stderr inherited), its exit status passed up
(a signal N as 128 + N), and one JSON report written to `report_fd` just before the exec: which
isolation steps held and why the others did not.

Run with `python -I -S` and the standard library only (it never imports graphrl). Three processes:

  L0 (this process)    joins the pids cgroup, unshares namespaces, forks L1, waits for it
  L1 (pid 1 when new)  private mounts: fresh /proc, minimal /dev, everything read-only except the
                       work directory; forks L2, reaps orphans, exits when L2 exits
  L2                   rlimits, drops every capability and sets no_new_privs, execs python

Every step is best effort: a step the OS refuses is recorded in the report and the next one still
runs. When L1 is pid 1 of a new pid namespace, its exit (or death: it gets SIGKILL when L0 dies)
makes the kernel kill every process left in the namespace, including ones that left the session.
"""

import ctypes
import json
import os
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
KEEP_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # + noatime, nodiratime, relatime
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 28, 38, 47
SECURE_NOROOT_ALL = 0x3 | 0xC | 0x30  # noroot, no_setuid_fixup, keep_caps_locked (+ their locks)
DEVICES = ("null", "zero", "full", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name, *args):
    fn = getattr(_libc, name)
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _unshare(report):
    """New net + pid + mount namespaces; through a user namespace when we are not root."""
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:
        try:
            _call("unshare", CLONE_NEWUSER)
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"0 {uid} 1")
            _write("/proc/self/gid_map", f"0 {gid} 1")
            report["user_namespace"] = True
        except OSError as exc:
            report["errors"].append(f"user namespace: {exc}")
            return
    for flag, key in (
        (CLONE_NEWNET, "network_isolated"),
        (CLONE_NEWPID, "pid_namespace"),
        (CLONE_NEWNS, "mount_namespace"),
    ):
        try:
            _call("unshare", flag)
            report[key] = True
        except OSError as exc:
            report["errors"].append(f"{key}: {exc}")


def _mountpoints():
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            points.append(mp.encode().decode("unicode_escape") if "\\" in mp else mp)
    return points


def _minimal_dev(workdir, report):
    """A private tmpfs on /dev holding only null, zero, full, random, urandom (bound from the host)."""
    stage = os.path.join(workdir, ".graphrl-dev")
    os.mkdir(stage)
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16m,mode=755")
    for name in DEVICES:
        open(os.path.join(stage, name), "w").close()
        _mount("/dev/" + name, os.path.join(stage, name), None, MS_BIND)
    os.mkdir(os.path.join(stage, "shm"), 0o1777)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, os.path.join(stage, name))
    _mount(stage, "/dev", None, MS_MOVE)
    os.rmdir(stage)
    report["dev_minimal"] = True


def _filesystem(workdir, report):
    """Private mount tree: fresh /proc, everything read-only but the work directory, minimal /dev."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if report.get("pid_namespace"):
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            report["proc_private"] = True
        except OSError as exc:
            report["errors"].append(f"fresh /proc: {exc}")
    _mount(workdir, workdir, None, MS_BIND)
    points = [mp for mp in _mountpoints() if mp != workdir]
    for mp in points:
        try:
            keep = os.statvfs(mp).f_flag & KEEP_FLAGS
            _mount(None, mp, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)
        except OSError:
            pass  # e.g. a mount hidden under another one: checked below through what is visible
    failed = []
    for mp in points:  # what the code will see at each mount point must be read-only
        try:
            if not os.statvfs(mp).f_flag & os.ST_RDONLY:
                failed.append(mp)
        except OSError:
            pass  # not reachable from here, so not writable from here either
    report["filesystem_readonly"] = not failed
    if failed:
        report["errors"].append("still writable: " + ", ".join(failed[:5]))
    try:
        _minimal_dev(workdir, report)
    except OSError as exc:
        report["errors"].append(f"minimal /dev: {exc}")


def _drop_capabilities(report):
    """Empty bounding, ambient, effective, permitted and inheritable sets; no_new_privs."""
    try:
        if os.getuid() == 0:  # root (real, or mapped in a user namespace) holds capabilities
            cap = 0
            while _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
                cap += 1
            _libc.prctl(PR_SET_SECUREBITS, SECURE_NOROOT_ALL, 0, 0, 0)
            _libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
            header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
            data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} triples, all 0
            _call("capset", header, data)
        _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        report["capabilities_dropped"] = True
    except OSError as exc:
        report["errors"].append(f"capabilities: {exc}")


def _limits(cfg, report):
    applied = {}
    for name, res, value in (
        ("cpu_s", resource.RLIMIT_CPU, cfg["cpu_s"]),
        ("memory_bytes", resource.RLIMIT_AS, cfg["memory_bytes"]),
        ("file_bytes", resource.RLIMIT_FSIZE, cfg["file_bytes"]),
        ("processes", resource.RLIMIT_NPROC, cfg["max_procs"]),
        ("core_bytes", resource.RLIMIT_CORE, 0),
    ):
        try:
            hard = value + 1 if name == "cpu_s" else value  # SIGXCPU at the soft limit, SIGKILL at the hard one
            resource.setrlimit(res, (value, hard))
            applied[name] = value
        except (ValueError, OSError) as exc:
            report["errors"].append(f"rlimit {name}: {exc}")
    report["rlimits"] = applied
    # RLIMIT_NPROC counts the processes of the real uid; it binds only when that uid is not root
    if report["process_limit"] is None and "processes" in applied and not cfg["real_root"]:
        report["process_limit"] = f"rlimit:{cfg['max_procs']}"


def _wait_for(pid):
    """Wait for `pid`, reaping any other child (orphans re-parented to pid 1); its status as an exit code."""
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if got == pid:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def _die_with_parent():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main():
    cfg = json.loads(sys.argv[1])
    # L0 dies with the graphrl process that started it (SIGKILL included): then L1 gets its own
    # PDEATHSIG and, as pid 1 of the namespace, takes every process of the run with it. A parent
    # that died before the prctl took effect is seen as a changed parent pid.
    _die_with_parent()
    if cfg.get("parent_pid") and os.getppid() != cfg["parent_pid"]:
        os._exit(137)
    report_fd = cfg["report_fd"]
    report = {
        "launcher": True,
        "user_namespace": False,
        "network_isolated": False,
        "pid_namespace": False,
        "mount_namespace": False,
        "proc_private": False,
        "filesystem_readonly": False,
        "dev_minimal": False,
        "capabilities_dropped": False,
        "process_limit": None,
        "rlimits": {},
        "errors": [],
    }
    cfg["real_root"] = os.getuid() == 0
    if cfg.get("cgroup"):
        try:
            _write(os.path.join(cfg["cgroup"], "cgroup.procs"), str(os.getpid()))
            report["process_limit"] = f"cgroup:{cfg['max_procs']}"
        except OSError as exc:
            report["errors"].append(f"pids cgroup: {exc}")
    if cfg.get("isolate", True):
        _unshare(report)
    l1 = os.fork()
    if l1:
        os.close(report_fd)
        sys.exit(_wait_for(l1))
    # L1: pid 1 of the new pid namespace (when there is one)
    _die_with_parent()
    if report["mount_namespace"]:
        try:
            _filesystem(cfg["workdir"], report)
        except OSError as exc:
            report["errors"].append(f"mounts: {exc}")
    l2 = os.fork()
    if l2:
        os.close(report_fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # only the parent's SIGKILL (or L0's death) ends L1
        sys.exit(_wait_for(l2))
    # L2: becomes the user's program
    _die_with_parent()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    _limits(cfg, report)
    _drop_capabilities(report)
    os.write(report_fd, json.dumps(report).encode())
    os.close(report_fd)
    os.chdir(cfg["workdir"])
    try:
        os.execve(cfg["python"], [cfg["python"], "-I", cfg["script"]], cfg["env"])
    except OSError as exc:
        os.write(2, f"sandbox: cannot start python: {exc}\n".encode())
        os._exit(126)


if __name__ == "__main__":
    main()
