"""The python tool's fork server, child side: one waiting interpreter that forks a sandbox per call.

Input: started by `sandbox_fork` as `python -I main.py` (exactly how a cold call's code starts, so
its interpreter state is a fresh script's), with one end of a SOCK_SEQPACKET socket pair. Each
message on it is a call: a `marshal`-ed config (the launcher's, backend "fork") and four fds:
stdin (read end), stdout (write end; stderr joins it), the report pipe and the status pipe.
Output, per call: a forked L0 that writes b"<its pid>\\n" on the status pipe, then runs the
launcher's own steps (`_sandbox_launcher.isolate`: cgroups, priority, namespaces, mounts, limits,
capabilities, seccomp, report) and ends with b"X<exit code>\\n" there; its L2 returns out of `serve`
into the main module, which then runs `sandbox_waiter.WAITER` as a warm sandbox does.

Invariants: the server itself never runs user code and never changes after start-up (each call is
a fork of the same state: nothing a call does reaches the server or another call); it is
single-threaded (fork and unshare need that); it dies with graphrl (parent-death signal, checked
against the pid graphrl gave) and exits when graphrl closes the socket; its children are reaped
by the kernel (SIGCHLD ignored here, restored in each L0), and so are the L1s of killed L0s (the
server is their subreaper). Before the code's module runs, L2 puts
back what a fresh `python -I main.py` in the call's work directory would have: `__file__` and
`__loader__`, the environment's HOME and TMPDIR, `sys.path`, and `sys.modules` without what the
server imported. Standard library only; it never imports graphrl.
"""

import _signal as signal
import marshal
import os
import sys

import _sandbox_launcher as launcher

CALL_FDS = 4  # stdin, stdout, report, status
PR_SET_CHILD_SUBREAPER = 36


def serve(ctl_fd, parent_pid, before, main):
    """Wait for calls on `ctl_fd`; in the parent this never returns. `before`: (sys.modules names,
    sys.path, sys.path_importer_cache keys) as the interpreter started; `main`: the main module's
    globals. Returns in a call's L2, ready to run the waiter."""
    launcher._die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(137)
    import socket

    ctl = socket.socket(fileno=ctl_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps each call's L0
    # and, as their subreaper, each L1 a killed L0 left behind, at once: reparented to the machine's
    # init, it stayed a zombie until init reaped it, counted in its call's pids cgroup meanwhile
    launcher._libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    me = os.getpid()
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 16, CALL_FDS)
        except InterruptedError:
            continue
        except OSError:
            os._exit(0)
        if not msg:  # graphrl closed its end: the calls in flight may finish (graphrl kills us after 2 s)
            _wait_for_children()
            os._exit(0)
        pid = -1
        if len(fds) == CALL_FDS:
            try:
                pid = os.fork()
            except OSError:
                pid = -1  # the status pipe closes with no pid: graphrl starts that call cold
        if pid == 0:
            break
        for fd in fds:
            os.close(fd)
    # L0 of one call
    ctl.detach()
    os.close(ctl_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    launcher._die_with_parent()
    if os.getppid() != me:
        os._exit(137)
    os.setsid()  # a session (and process group, and scheduling autogroup) of its own
    stdin_r, out_w, report_w, status_w = fds
    os.dup2(stdin_r, 0)
    os.dup2(out_w, 1)
    os.dup2(out_w, 2)
    os.close(stdin_r)
    os.close(out_w)
    try:
        os.write(status_w, b"%d\n" % os.getpid())
    except OSError:
        os._exit(125)  # graphrl gave the call up already
    cfg = marshal.loads(msg)
    launcher.isolate(cfg, report_w, status_w, in_process=True)
    _as_fresh_script(cfg, before, main)


def _as_fresh_script(cfg, before, main):
    """L2: the interpreter as `python -I main.py` started in the call's work directory would be."""
    modules, path, importers = before
    workdir = cfg["workdir"]
    os.chdir(workdir)
    for key in ("HOME", "TMPDIR"):
        os.environ[key] = cfg["env"][key]
    file = os.path.join(workdir, "main.py")
    main.pop("_zygote", None)
    main["__file__"] = file
    main["__loader__"] = type(main["__loader__"])("__main__", file)
    sys.path[:] = path
    for key in [k for k in sys.path_importer_cache if k not in importers]:
        del sys.path_importer_cache[key]
    for name in [n for n in sys.modules if n not in modules]:
        del sys.modules[name]


def _wait_for_children():
    """Until the last fork has ended (SIGCHLD is ignored: wait() returns when none is left)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue
