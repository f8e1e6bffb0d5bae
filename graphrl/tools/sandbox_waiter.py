"""A warm sandbox's main.py (`WAITER`): an interpreter started ahead of time that runs one call's code.

Input: nothing at import; the sandbox runs the text as `python -I main.py` with everything set up
(namespaces, mounts, cgroups, limits, seccomp) and then reads "<cpu seconds> <n>\\n" + n bytes of
code on stdin. Output: that code run as `__main__` in the same interpreter, as a cold
`python -I main.py` would run it (what differs: docs/sandbox.md, two outer frames).
Used by `python_exec.take_warm` (the header), `sandbox_pool` (warm sandboxes) and `sandbox_fork`
(each fork falls through to it).
"""

# A warm sandbox's main.py, started as `python -I main.py` with everything set up (namespaces, mounts,
# cgroups, limits, seccomp): it waits for "<cpu seconds> <n>\n" + n bytes of code on stdin, lowers its
# CPU limit to that, writes the code as main.py over itself and runs it in this same, fresh interpreter
# as the `__main__` module (the globals hold only what `python -I main.py` starts with: the waiter's
# one name is deleted first, `resource` leaves `sys.modules`), so the call pays no second interpreter
# start. The rest of stdin is the program's. Code that does not compile execs a fresh `python -I
# main.py` (the file parser words its errors differently from `compile()`). An uncaught exception is
# handled as the interpreter does: both streams flushed, `sys.excepthook` called (a broken hook gets the
# interpreter's two-part message), without the waiter's frame, exit status 1; a bare KeyboardInterrupt
# goes back to the interpreter, which finalizes and dies by SIGINT. The names the waiter uses after the
# program has run are bound as defaults, so a program that rebinds `type` or `SystemExit` changes
# nothing. What differs from a cold call: two outer frames (docs/sandbox.md lists what that shows).
WAITER = r"""
def _serve(exec=exec, compile=compile, type=type, BaseException=BaseException, SystemExit=SystemExit,
           KeyboardInterrupt=KeyboardInterrupt, TB=BaseException.__dict__["__traceback__"]):
    import os, sys
    main = sys.modules["__main__"].__dict__
    del main["_serve"]

    def take(n):
        out = b""
        while len(out) < n:
            chunk = os.read(0, n - len(out))
            if not chunk:
                os._exit(0)
            out += chunk
        return out

    head = b""
    while not head.endswith(b"\n"):
        head += take(1)
    cpu, size = (int(x) for x in head.split())
    code = take(size)
    with open("main.py", "wb") as f:
        f.write(code)
    import resource
    use = resource.getrusage(resource.RUSAGE_SELF)
    limit = max(cpu, int(use.ru_utime + use.ru_stime) + 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    cap = lambda x, lim: x if lim == resource.RLIM_INFINITY else min(x, lim)
    resource.setrlimit(resource.RLIMIT_CPU, (cap(limit, soft), cap(limit + 1, hard)))
    del sys.modules["resource"], resource, use, soft, hard, cap, head, take
    try:
        code = compile(code, main["__file__"], "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # the parser's own words, from a file
        os.execv(sys.executable, [sys.executable, "-I", "main.py"])
    try:
        exec(code, main)
    except SystemExit:
        raise
    except BaseException as exc:
        del code
        tb = TB.__get__(exc)
        TB.__set__(exc, tb.tb_next if tb is not None else None)  # without this frame
        for name in ("stderr", "stdout"):  # as the interpreter does before printing
            try:
                sys.__dict__[name].flush()
            except BaseException:
                pass
        try:
            if "excepthook" not in sys.__dict__:
                sys.__dict__["stderr"].write("sys.excepthook is missing\n")
                sys.__excepthook__(type(exc), exc, TB.__get__(exc))
            else:
                sys.__dict__["excepthook"](type(exc), exc, TB.__get__(exc))
        except BaseException as err:  # the hook failed: its error, then the original
            TB.__set__(err, TB.__get__(err).tb_next)
            err.__suppress_context__ = True
            sys.__dict__["stderr"].write("Error in sys.excepthook:\n")
            sys.__excepthook__(type(err), err, None)
            sys.__dict__["stderr"].write("\nOriginal exception was:\n")
            sys.__excepthook__(type(exc), exc, TB.__get__(exc))
        if type(exc) is KeyboardInterrupt:  # the interpreter's own exit: finalization, then SIGINT
            sys.excepthook = lambda *a: None
            raise
        raise SystemExit(1) from None
_serve()
"""
