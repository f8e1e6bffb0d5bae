"""Sandbox launcher: runs as the child of `run_python`, isolates itself, then execs the user's code.

Input: argv[1] = the config, `marshal`-ed and hex-encoded {backend, python, script, workdir, strict, strict_paths, disk_bytes, cpu_s,
memory_bytes, file_bytes, max_procs, cgroups, report_fd, bwrap}. Output: the user's program
(stdout/stderr inherited), its exit status passed up (a signal N as 128 + N), and one report (a
`marshal`-ed dict) written to `report_fd` just before the exec: which isolation steps held and why the
others did not.

Run with `python -I -S`, imported by name so that its bytecode cache is used, and the standard library
only (it never imports graphrl). `marshal` rather than `json`: importing json costs more than the rest of
this process's start (about 10 ms of CPU per call, measured), and both ends are the same interpreter.

backend "bubblewrap": this process joins the call's cgroups, sets the rlimits, hands bubblewrap a
seccomp program (no unix-domain sockets, no io_uring) and execs it with the argument list the parent
built (`bwrap` does the namespaces, mounts and capability drop; it is well kept and used by Flatpak).

backend "launcher" (the fallback, hand-written): three processes:

  L0 (this process)    joins the cgroups, unshares namespaces, forks L1, waits for it
  L1 (pid 1 when new)  private mounts: fresh /proc, minimal /dev, a size-limited tmpfs as the work
                       directory, everything else read-only (strict: a new root holding only the
                       interpreter, /usr and the libraries); forks L2, reaps orphans, exits with L2
  L2                   rlimits, drops every capability, no_new_privs, the seccomp program, execs python

The fork server (`_sandbox_zygote`) runs the same three steps (`isolate`) in a fork of a waiting
interpreter: L0 is that fork, and L2 returns into the interpreter instead of exec'ing a new one.

Every step is best effort: a step the OS refuses is recorded in the report and the next one still
runs. When L1 is pid 1 of a new pid namespace, its exit (or death: it gets SIGKILL when L0 dies)
makes the kernel kill every process left in the namespace, including ones that left the session.
"""

import _signal as signal  # the C module behind `signal`: the same calls, without importing enum (~3 ms a call)
import ctypes
import errno
import marshal
import os
import resource
import struct
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC, CLONE_NEWUTS = 0x08000000, 0x04000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
KEEP_FLAGS = MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096  # + noatime, nodiratime, relatime
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 24, 28, 38, 47
SECURE_NOROOT_ALL = 0x3 | 0xC | 0x30  # noroot, no_setuid_fixup, keep_caps_locked (+ their locks)
DEVICES = ("null", "zero", "full", "random", "urandom")
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# (AUDIT_ARCH, socket, socketpair, refused with EPERM: io_uring_setup, add_key, request_key, keyctl) per
# machine; other machines get no filter (reported)
SYSCALLS = {
    "x86_64": (0xC000003E, 41, 53, (425, 248, 249, 250)),
    "aarch64": (0xC00000B7, 198, 199, (425, 217, 218, 219)),
}
AF_UNIX, SOCK_DGRAM = 1, 2

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name, *args):
    fn = getattr(_libc, name)
    if fn(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


AUTOGROUP_NICE = 10  # the call's scheduling autogroup: see lower_priority


def lower_priority(pid=0):
    """Give the call's session (its own: the parent starts every sandbox with setsid) a lower CPU
    weight than the process that runs the rollouts. Where the kernel groups scheduling by session
    (autogroup, CONFIG_SCHED_AUTOGROUP), each sandbox would otherwise weigh as
    much as the whole graphrl process, and a few busy ones take the event loop's core; with nice 10
    a sandbox gets about a tenth of that weight when both want the CPU, and all of it when the loop
    is idle. Raising the nice of one's own autogroup needs no privilege, but without CAP_SYS_ADMIN the
    kernel allows one autogroup change per 100 ms machine-wide (EAGAIN otherwise, ignored): best effort
    for a non-root graphrl. Where there is no autogroup nothing changes (processes then compete one by
    one, as any subprocess of graphrl would). `pid`: the process whose session it is (0: this one;
    graphrl passes the waiting shell of `sandbox_shell`)."""
    try:
        if os.getsid(pid) != (pid or os.getpid()):  # not its own session: it would lower the caller's weight
            return
        _write(f"/proc/{pid or 'self'}/autogroup", str(AUTOGROUP_NICE))
    except OSError:
        pass


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def seccomp_program(machine=None):
    """The classic-BPF program (bytes of `struct sock_filter`) that refuses unix-domain sockets.

    socket(AF_UNIX, ...) fails with EACCES, so no socket file on the host (a database's, a container
    runtime's) can be connected to or sent to; socketpair() stays for SOCK_STREAM / SOCK_SEQPACKET
    (asyncio's self-pipe uses it; a connected pair cannot be pointed elsewhere) and is refused for
    SOCK_DGRAM (whose sendto() takes any path). io_uring_setup fails (its socket operations would
    bypass the filter), and so do add_key, request_key and keyctl (the kernel's keyrings are not
    namespaced: as root without a user namespace the code would share uid 0's keyring with the host
    and every other call); 32-bit calls from a 64-bit process kill it, x32 calls fail with ENOSYS.
    None on a machine without a table entry.
    """
    entry = SYSCALLS.get(machine or os.uname().machine)
    if entry is None:
        return None
    audit, nr_socket, nr_pair, refused = entry
    ld, jeq, jge, and_, ret = 0x20, 0x15, 0x35, 0x54, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    deny = lambda err: 0x00050000 | err  # SECCOMP_RET_ERRNO
    prog = [
        (ld, 0, 0, 4),  # arch
        (jeq, 1, 0, audit),  # ours -> skip the kill
        (ret, 0, 0, kill),
        (ld, 0, 0, 0),  # syscall number
        (jge, 0, 1, 0x40000000),  # x32 -> ENOSYS
        (ret, 0, 0, deny(errno.ENOSYS)),
    ]
    for nr in refused:  # each: this one -> EPERM, else the next check
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, deny(errno.EPERM))]
    prog += [
        (jeq, 0, 3, nr_socket),  # socket -> look at its domain, else -> socketpair
        (ld, 0, 0, 16),  # args[0] (domain)
        (jeq, 0, 6, AF_UNIX),  # AF_UNIX -> EACCES, else -> allow
        (ret, 0, 0, deny(errno.EACCES)),
        (jeq, 0, 4, nr_pair),  # socketpair -> look at its type, else -> allow
        (ld, 0, 0, 24),  # args[1] (type and flags)
        (and_, 0, 0, 0xF),  # the type alone
        (jeq, 0, 1, SOCK_DGRAM),  # SOCK_DGRAM -> EACCES, else -> allow
        (ret, 0, 0, deny(errno.EACCES)),
        (ret, 0, 0, allow),
    ]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _seccomp(report):
    """Install `seccomp_program()` on this process (no_new_privs must be set already)."""
    prog = seccomp_program()
    if prog is None:
        report["errors"].append(f"seccomp: no filter for {os.uname().machine}: unix sockets stay reachable")
        return

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    fprog = Fprog(len(prog) // 8, prog)
    try:
        _call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)
        report["unix_sockets_blocked"] = True
    except OSError as exc:
        report["errors"].append(f"seccomp: {exc}")


def _unshare(report):
    """New net + pid + mount + ipc + uts namespaces; through a user namespace when we are not root."""
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
        (CLONE_NEWIPC | CLONE_NEWUTS, "ipc_namespace"),  # SysV IPC and POSIX queues; the host name
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


def _minimal_dev(workdir, report, target):
    """A private tmpfs on `target` (/dev) holding only null, zero, full, random, urandom (bound from the host)."""
    stage = os.path.join(workdir, ".graphrl-dev")
    os.mkdir(stage)
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=16m,mode=755")
    for name in DEVICES:
        open(os.path.join(stage, name), "w").close()
        _mount("/dev/" + name, os.path.join(stage, name), None, MS_BIND)
    os.mkdir(os.path.join(stage, "shm"), 0o1777)
    for name, link in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(link, os.path.join(stage, name))
    _mount(stage, target, None, MS_MOVE)
    os.rmdir(stage)
    report["dev_minimal"] = True


def _workdir_tmpfs(cfg, target, report):
    """A tmpfs of `disk_bytes` at `target` holding the script (none for the fork server, whose
    waiter writes it): every byte the code writes counts."""
    code = None
    if cfg.get("script"):
        with open(os.path.join(cfg["workdir"], cfg["script"]), "rb") as f:
            code = f.read()
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['disk_bytes']},mode=700")
    if code is not None:
        with open(os.path.join(target, cfg["script"]), "wb") as f:
            f.write(code)
    report["disk_limit"] = f"tmpfs:{cfg['disk_bytes']}"


def _strict_root(cfg, report):
    """Replace / by a tmpfs holding read-only binds of `strict_paths` (interpreter, /usr, libraries),
    the work directory, /proc and a minimal /dev; nothing else of the host is reachable."""
    workdir = cfg["workdir"]
    new = os.path.join(workdir, ".graphrl-root")
    os.mkdir(new)
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path, link in cfg["strict_paths"]:
        dest = new + path
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if link is not None:
            os.symlink(link, dest)
            continue
        os.makedirs(dest, exist_ok=True)
        _mount(path, dest, None, MS_BIND | MS_REC)
        _mount(None, dest, None, MS_REMOUNT | MS_BIND | MS_RDONLY | (os.statvfs(dest).f_flag & KEEP_FLAGS))
    os.makedirs(new + workdir)
    _workdir_tmpfs(cfg, new + workdir, report)
    os.mkdir(new + "/proc")
    _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    report["proc_private"] = bool(report.get("pid_namespace"))
    os.mkdir(new + "/dev")
    _minimal_dev(new + workdir, report, new + "/dev")
    os.chdir(new)
    _mount(new, "/", None, MS_MOVE)
    _libc.chroot(b".")  # capabilities are dropped before the code runs, so it cannot chroot back out
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    report["filesystem_readonly"] = True
    report["strict_root"] = True


def _filesystem(cfg, report):
    """Private mount tree: fresh /proc, everything read-only but the work directory (a size-limited
    tmpfs), minimal /dev; or, strict, a new root (`_strict_root`)."""
    workdir = cfg["workdir"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if cfg.get("strict"):
        _strict_root(cfg, report)
        return
    if report.get("pid_namespace"):
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            report["proc_private"] = True
        except OSError as exc:
            report["errors"].append(f"fresh /proc: {exc}")
    try:
        _workdir_tmpfs(cfg, workdir, report)
    except OSError as exc:
        report["errors"].append(f"work directory tmpfs: {exc}")
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
        _minimal_dev(workdir, report, "/dev")
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


def rlimit_values(cfg):
    """(report name, resource, soft, hard) of every limit a call gets: SIGXCPU at the soft CPU limit,
    SIGKILL one second later at the hard one."""
    return (
        ("cpu_s", resource.RLIMIT_CPU, cfg["cpu_s"], cfg["cpu_s"] + 1),
        ("memory_bytes", resource.RLIMIT_AS, cfg["memory_bytes"], cfg["memory_bytes"]),
        ("file_bytes", resource.RLIMIT_FSIZE, cfg["file_bytes"], cfg["file_bytes"]),
        ("processes", resource.RLIMIT_NPROC, cfg["max_procs"], cfg["max_procs"]),
        ("core_bytes", resource.RLIMIT_CORE, 0, 0),
    )


def limits_applied(cfg, report, applied):
    """Record the applied limits; RLIMIT_NPROC counts the processes of the real uid, so it binds only
    when that uid is not root (and no pids cgroup already does)."""
    report["rlimits"] = applied
    if report["process_limit"] is None and "processes" in applied and not cfg["real_root"]:
        report["process_limit"] = f"rlimit:{cfg['max_procs']}"


def _limits(cfg, report):
    applied = {}
    for name, res, soft, hard in rlimit_values(cfg):
        try:
            resource.setrlimit(res, (soft, hard))
            applied[name] = soft
        except (ValueError, OSError) as exc:
            report["errors"].append(f"rlimit {name}: {exc}")
    limits_applied(cfg, report, applied)


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


def _join_cgroups(cfg, report):
    """Join the call's cgroups (made by the parent): pids.max and the memory limit of the whole call."""
    for group in cfg.get("cgroups") or []:
        try:
            _write(os.path.join(group["path"], "cgroup.procs"), str(os.getpid()))
        except OSError as exc:
            report["errors"].append(f"{group['kind']} cgroup: {exc}")
            continue
        cgroup_joined(cfg, report, group)


def _exec_bubblewrap(cfg, report, report_fd):
    """L0 of the bubblewrap backend: limits here, isolation by `bwrap`, the seccomp program through a pipe."""
    _limits(cfg, report)
    prog = seccomp_program()
    argv = [cfg["bwrap"]]
    if prog is None:
        report["errors"].append(f"seccomp: no filter for {os.uname().machine}: unix sockets stay reachable")
    else:
        r, w = os.pipe()
        os.write(w, prog)
        os.close(w)
        os.set_inheritable(r, True)
        argv += ["--seccomp", str(r)]
        report["unix_sockets_blocked"] = True
    # `bwrap_args` come from the parent (python_exec.bubblewrap_args): namespaces, mounts, caps, env
    argv += cfg["bwrap_args"]
    fd = os.open(os.path.join(cfg["workdir"], cfg["script"]), os.O_RDONLY)
    os.set_inheritable(fd, True)
    argv = [str(fd) if a == "{script_fd}" else a for a in argv]
    report.update(cfg["bwrap_claims"])
    os.write(report_fd, marshal.dumps(report))
    os.close(report_fd)
    try:
        os.execv(cfg["bwrap"], argv)
    except OSError as exc:
        os.write(2, f"sandbox: cannot start bubblewrap: {exc}\n".encode())
        os._exit(126)


def new_report(backend, memory_bytes):
    """The report before any step: nothing held yet."""
    return {
        "launcher": True,
        "backend": backend,
        "strict_root": False,
        "user_namespace": False,
        "network_isolated": False,
        "pid_namespace": False,
        "ipc_namespace": False,
        "mount_namespace": False,
        "proc_private": False,
        "filesystem_readonly": False,
        "dev_minimal": False,
        "capabilities_dropped": False,
        "unix_sockets_blocked": False,
        "process_limit": None,
        "memory_limit": f"rlimit-per-process:{memory_bytes}",
        "disk_limit": None,
        "rlimits": {},
        "errors": [],
    }


def cgroup_joined(cfg, report, group):
    """What joining `group` (one of the call's cgroups) guarantees."""
    if group["kind"] in ("pids", "unified"):
        report["process_limit"] = f"cgroup:{cfg['max_procs']}"
    if group["kind"] in ("memory", "unified"):
        report["memory_limit"] = f"cgroup:{cfg['memory_bytes']}"


def main():
    cfg = marshal.loads(bytes.fromhex(sys.argv[1]))
    # L0 dies with the graphrl process that started it (SIGKILL included): then L1 gets its own
    # PDEATHSIG and, as pid 1 of the namespace, takes every process of the run with it. A parent
    # that died before the prctl took effect is seen as a changed parent pid.
    _die_with_parent()
    if cfg.get("parent_pid") and os.getppid() != cfg["parent_pid"]:
        os._exit(137)
    isolate(cfg, cfg["report_fd"])
    os.chdir(cfg["workdir"])
    try:
        os.execve(cfg["python"], [cfg["python"], "-I", cfg["script"]], cfg["env"])
    except OSError as exc:
        os.write(2, f"sandbox: cannot start python: {exc}\n".encode())
        os._exit(126)


def isolate(cfg, report_fd, status_fd=None, in_process=False):
    """L0 -> L1 -> L2 (module docstring): returns in L2, isolated, with the report written to
    `report_fd` and closed; L0 and L1 never return. Backend "bubblewrap" execs bwrap from L0 instead.
    `status_fd` (the fork server's, `_sandbox_zygote`): L0 writes b"X<exit code>\n" there before it
    exits; L1 and L2 close it. `in_process`: L2 will run the code in this interpreter, so SIGINT
    gets Python's own handler back rather than the default action."""
    backend = cfg.get("backend", "launcher")
    report = new_report(backend, cfg["memory_bytes"])
    cfg["real_root"] = os.getuid() == 0
    _join_cgroups(cfg, report)
    lower_priority()
    if backend == "bubblewrap":
        _exec_bubblewrap(cfg, report, report_fd)
    if backend != "none":
        _unshare(report)
    l1 = os.fork()
    if l1:
        os.close(report_fd)
        code = _wait_for(l1)
        if status_fd is not None:
            try:
                os.write(status_fd, b"X%d\n" % code)
            except OSError:
                pass
        os._exit(code)  # no interpreter teardown: the call ends as soon as its code does
    # L1: pid 1 of the new pid namespace (when there is one)
    if status_fd is not None:
        os.close(status_fd)
    _die_with_parent()
    if report["mount_namespace"]:
        try:
            _filesystem(cfg, report)
        except OSError as exc:
            report["errors"].append(f"mounts: {exc}")
    if cfg.get("strict") and not report["strict_root"]:  # fail closed: never run strict code unconfined
        os.write(2, f"sandbox: strict mode unavailable here: {'; '.join(report['errors'])}\n".encode())
        os._exit(126)
    l2 = os.fork()
    if l2:
        os.close(report_fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # only the parent's SIGKILL (or L0's death) ends L1
        os._exit(_wait_for(l2))
    # L2: becomes the user's program
    _die_with_parent()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler if in_process else signal.SIG_DFL)
    _limits(cfg, report)
    _drop_capabilities(report)
    if backend != "none" and report["capabilities_dropped"]:
        _seccomp(report)
    os.write(report_fd, marshal.dumps(report))
    os.close(report_fd)
    return report


if __name__ == "__main__":
    main()
