"""Warm sandboxes (`SandboxPool`): a call served by a sandbox started ahead of time behaves exactly as
a cold call (output, exit status, stdin, timeout, output cap, limits, report), each warm sandbox
serves one call only, and closing the pool leaves no process, directory or cgroup behind."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from graphrl.tools.python_exec import run_python
from graphrl.tools.sandbox_fork import ForkServer
from graphrl.tools.sandbox_host import SandboxPolicy, bubblewrap_works, fork_works
from graphrl.tools.sandbox_pool import SandboxPool

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_procs import leftovers, no_leftovers, warm_up_loops

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux")
BACKENDS = ["launcher"] + (["bubblewrap"] if sys.platform == "linux" and bubblewrap_works() else [])

PROGRAMS = [
    ("print('hello')\nimport sys\nprint('err', file=sys.stderr)", None, 5),
    ("import sys\nsys.exit(3)", None, 5),
    ("raise ValueError('boom')", None, 5),
    ("import sys\nprint(sys.stdin.read().upper())", "from stdin", 5),
    ("import time\ntime.sleep(10)", None, 1),
    ("while True:\n    print('x' * 10000)", None, 5),
    ("import os\nprint(sorted(os.listdir('.')), os.getcwd().startswith('/tmp/graphrl-py-'))", None, 5),
    ("import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU))", None, 7),
    ("blob = bytearray(4 << 30)", None, 5),
    # the program runs in the warm sandbox's own interpreter: nothing of the waiter may show
    (
        "import sys\nprint(sorted(globals()), __name__, __doc__, __package__, __spec__, __cached__)\n"
        "print(__file__, sys.argv, sys.orig_argv[1:], type(__loader__).__name__, __loader__.name)\n"
        "print(sorted(sys.modules))",
        None,
        5,
    ),
    ('"""doc"""\nx: int = 1\nprint(__doc__, __annotations__, x)', None, 5),
    ("x = (\n", None, 5),
    ("x = 1\0", None, 5),
    ("# -*- coding: latin-1 -*-\nprint('caf\xe9')", None, 5),
    (
        "def f():\n    raise KeyError('k')\ntry:\n    f()\nexcept KeyError as e:\n    raise RuntimeError('wrapped') from e",
        None,
        5,
    ),
    ("import sys\nsys.excepthook = lambda *a: print('hook', a[0].__name__)\n1/0", None, 5),
    (
        "import atexit, threading, time\natexit.register(print, 'at exit')\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()\nprint('main')",
        None,
        5,
    ),
    ("raise KeyboardInterrupt", None, 5),
    ("raise SystemExit('bye')", None, 5),
    ("import traceback\ntry:\n    {}['missing']\nexcept KeyError:\n    traceback.print_exc()\nprint('after')", None, 5),
    # found by review: buffered output before the traceback, finalization on KeyboardInterrupt, the
    # waiter's own names shadowed by the program's, broken hooks, an unknown encoding
    ("print('first')\n1/0", None, 5),
    ("print('buffered')\nimport atexit\natexit.register(print, 'at exit')\nraise KeyboardInterrupt", None, 5),
    ("class K(KeyboardInterrupt):\n    pass\nraise K", None, 5),
    ("type = 'x'\n1/0", None, 5),
    ("class SystemExit(Exception):\n    pass\nimport sys\nsys.exit(3)", None, 5),
    ("BaseException = None\nraise ValueError(1)", None, 5),
    ("import sys\nsys.excepthook = None\n1/0", None, 5),
    ("import sys\ndef h(*a):\n    raise RuntimeError('hook')\nsys.excepthook = h\n1/0", None, 5),
    ("import sys\ndel sys.excepthook\n1/0", None, 5),
    ("class E(Exception):\n    __traceback__ = property(lambda s: None)\nraise E", None, 5),
    ("# coding: foo\nprint(1)", None, 5),
    # a fork's I/O on raw pipes (`ForkedProcess.exchange`): stdin past a pipe's buffer, read whole or
    # not at all; output closed well before the exit (its status still comes)
    ("import sys\ndata = sys.stdin.read()\nprint(len(data), data[-3:])", "x" * 300_000 + "end", 5),
    ("print('stdin ignored')", "y" * 300_000, 5),
    ("import os, time\nprint('closing', flush=True)\nos.close(1)\nos.close(2)\ntime.sleep(0.5)\nos._exit(4)", None, 5),
]


def _text(res) -> str:
    """The observation with the random work directory name taken out."""
    return re.sub(r"graphrl-py-\d+-\w+", "graphrl-py-WORKDIR", res.text)


@pytest.mark.parametrize("backend", BACKENDS + (["fork"] if sys.platform == "linux" and fork_works() else []))
def test_a_warm_call_is_the_same_as_a_cold_one(backend):
    """Warm: a pool's started sandbox, or (fork) a fork of the fork server, against a cold call of
    the same backend (the fork server's sandbox is the launcher's)."""
    policy = SandboxPolicy(backend=backend, warm=2)
    cold_policy = SandboxPolicy(backend="launcher" if backend == "fork" else backend)

    async def both():
        pool = ForkServer(policy) if backend == "fork" else SandboxPool(policy, 2)
        await pool.take(policy)  # starts the pool (nothing ready yet on the very first take)
        out = []
        try:
            for code, stdin, timeout in PROGRAMS:
                await asyncio.sleep(0.3)  # let a warm one be ready
                served = pool.served
                warm = await run_python(code, timeout=timeout, stdin=stdin, policy=policy, warm=pool)
                assert pool.served == served + 1, f"not served warm: {code!r}"
                cold = await run_python(code, timeout=timeout, stdin=stdin, policy=cold_policy)
                out.append((code, warm, cold))
        finally:
            await pool.close()
        return out

    for code, warm, cold in asyncio.run(both()):
        assert (warm.ok, warm.error, warm.data["exit_status"]) == (cold.ok, cold.error, cold.data["exit_status"]), code
        assert _text(warm) == _text(cold), code
        if backend == "fork":
            assert warm.data["sandbox"]["backend"] == "fork"
            assert {**warm.data["sandbox"], "backend": "launcher"} == cold.data["sandbox"], code
        else:
            assert warm.data["sandbox"] == cold.data["sandbox"], code


def test_a_warm_sandbox_serves_one_call_and_close_removes_everything():
    policy = SandboxPolicy(backend="launcher", warm=3)

    async def go():
        pool = SandboxPool(policy, 3)
        await pool.take(policy)
        await asyncio.sleep(0.5)
        ready = list(pool._ready)
        a = await run_python("open('mark', 'w').write('1')\nimport os\nprint(os.getpid())", policy=policy, warm=pool)
        b = await run_python("import os\nprint(os.path.exists('mark'))", policy=policy, warm=pool)
        await asyncio.sleep(0.5)
        waiting = list(pool._ready)
        await pool.close()
        return a, b, ready, waiting

    a, b, ready, waiting = asyncio.run(go())
    assert a.ok and b.ok and b.text == "False\n"  # a fresh sandbox: nothing of the previous call
    assert len(ready) == 3 and len(waiting) == 3  # refilled to its size
    for run in ready + waiting:
        assert run.proc.returncode is not None
        assert not Path(run.workdir).exists()
        assert all(not os.path.exists(g["path"]) for g in run.cgroups)


def test_a_call_with_another_policy_is_never_served_warm():
    policy = SandboxPolicy(backend="launcher", warm=1)

    async def go():
        pool = SandboxPool(policy, 1)
        await pool.take(policy)
        await asyncio.sleep(0.5)
        strict = policy.with_strict(True)
        got = await pool.take(strict)
        await pool.close()
        return got

    assert asyncio.run(go()) is None


def test_the_warm_setting_comes_from_the_environment():
    assert SandboxPolicy.from_env({"GRAPHRL_SANDBOX_WARM": "0"}).warm == 0
    assert SandboxPolicy.from_env({}).warm == 2 and SandboxPolicy().warm == 0
    with pytest.raises(ValueError, match="GRAPHRL_SANDBOX_WARM='lots'"):
        SandboxPolicy.from_env({"GRAPHRL_SANDBOX_WARM": "lots"})
    for bad in ("2\u00b2", "\u00b2", "-1", "257"):  # a superscript passes str.isdigit, then int() fails
        with pytest.raises(ValueError, match="GRAPHRL_SANDBOX_WARM="):
            SandboxPolicy.from_env({"GRAPHRL_SANDBOX_WARM": bad})


def test_a_toolbox_pool_belongs_to_its_loop_and_ends_with_it():
    """ToolBox keeps one pool per event loop (LoopSessions): a loop that shuts down closes its pool,
    so no warm sandbox outlives the loop it was started for."""
    from graphrl.tools.registry import ToolBox

    box = ToolBox(sandbox=SandboxPolicy(backend="launcher", warm=1))
    pools = []

    async def one_call():
        res = await box.call("python", {"code": "print(1)"}, timeout=5, max_chars=None)
        await asyncio.sleep(0.5)  # the pool refills after the call
        pools.append(await box._pools.get())
        return res

    first = asyncio.run(one_call())
    second = asyncio.run(one_call())
    assert first.ok and second.ok
    assert pools[0] is not pools[1] and pools[0].closed and pools[1].closed
    assert box._pools.opened == 2


def test_a_warm_sandbox_is_ready_only_once_its_launcher_has_reported():
    """A sandbox joins the pool after its report is in: a call taking it at once gets the real report
    (before, one taken within milliseconds of its start read an empty pipe: "no report")."""
    policy = SandboxPolicy(backend="launcher", warm=2)

    async def go():
        pool = SandboxPool(policy, 2)
        await pool.take(policy)
        for _ in range(500):
            if pool._ready:
                break
            await asyncio.sleep(0.01)
        first = list(pool._ready)
        res = await run_python("print(1)", policy=policy, warm=pool)
        await pool.close()
        return first, res

    first, res = asyncio.run(go())
    assert first and all(run.report is not None and run.report["launcher"] for run in first)
    assert res.ok and res.data["sandbox"]["launcher"] and res.data["sandbox"]["capabilities_dropped"]


def test_code_that_cannot_be_encoded_fails_before_a_warm_sandbox_is_taken():
    """A lone surrogate (possible in a JSON tool argument) raises as a cold call does, and the warm
    sandbox it would have used stays in the pool instead of leaking."""
    policy = SandboxPolicy(backend="launcher", warm=1)

    async def go():
        pool = SandboxPool(policy, 1)
        await pool.take(policy)
        await asyncio.sleep(0.5)
        ready = list(pool._ready)
        with pytest.raises(UnicodeEncodeError):
            await run_python("print('\ud800')", policy=policy, warm=pool)
        after = list(pool._ready)
        await pool.close()
        return ready, after

    ready, after = asyncio.run(go())
    assert len(ready) == 1 and after == ready


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_start_cancelled_at_any_moment_ends_at_once_and_leaves_nothing(backend, monkeypatch):
    """Found by the full test suite: `pool.close()` cancels sandboxes still starting. Cancelled inside
    asyncio's spawn, a sandbox whose bwrap was killed while setting up left its inner process running
    (holding the pipes), and on Python 3.11 asyncio then waited for those pipes forever
    (benchmarks.sandbox hung); sandboxes are now started by `subprocess.Popen`
    (`piped_process.spawn`), which has no moment to cancel, and what remains is the set-up around it
    (bubblewrap's shell joins its cgroups in a thread). Every moment of the start is cancelled here,
    twice; each must end within seconds, with no process, work directory or cgroup left."""
    from graphrl.tools import python_exec, sandbox_waiter

    policy = SandboxPolicy(backend=backend)
    made: list[str] = []
    real_workdir = python_exec.make_workdir
    monkeypatch.setattr(python_exec, "make_workdir", lambda: made.append(real_workdir()) or made[-1])
    groups: list[str] = []
    real_cgroups = python_exec.make_cgroups

    def record_cgroups(p):
        made_groups = real_cgroups(p)
        groups.extend(g["path"] for g in made_groups)
        return made_groups

    monkeypatch.setattr(python_exec, "make_cgroups", record_cgroups)

    async def go():
        for i in range(60):
            task = asyncio.create_task(python_exec.launch(sandbox_waiter.WAITER, cpu_s=30, policy=policy))
            await asyncio.sleep(0.0003 * (i % 30))
            task.cancel()
            try:
                run = await asyncio.wait_for(task, 10)
            except asyncio.CancelledError:
                continue
            await asyncio.wait_for(python_exec.dispose(run), 10)  # it had started: stopped the usual way

    asyncio.run(go())
    assert no_leftovers(*made), [pid for w in made for pid in leftovers(w)]
    assert not [w for w in made if os.path.exists(w)]
    assert not [g for g in groups if os.path.exists(g)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_warm_up_fills_a_pool_of_started_sandboxes_before_the_first_call(backend):
    """`ToolBox.warm_up` starts a pool's sandboxes (bubblewrap, launcher) as it does the fork server's
    forks: the first call finds one ready."""
    from graphrl.tools.registry import ToolBox

    box = ToolBox(sandbox=SandboxPolicy(backend=backend, warm=2))

    async def go():
        try:
            box.warm_up({"python"})
            await asyncio.gather(*box._preparing)
            pool = await box._pools.get()
            for _ in range(1000):  # started, each once its launcher has reported
                if len(pool._ready) == 2:
                    break
                await asyncio.sleep(0.01)
            ready = len(pool._ready)
            res = await box.call("python", {"code": "print(3)"}, timeout=10, max_chars=None)
            return ready, res, pool
        finally:
            await box.close()

    ready, res, pool = asyncio.run(go())
    assert isinstance(pool, SandboxPool) and ready == 2
    assert res.ok and res.text == "3\n" and res.data["sandbox"]["backend"] == backend
    assert (pool.served, pool.missed) == (1, 0) and pool.closed


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_that_ends_during_a_pools_warm_up_ends_and_leaves_no_process(tmp_path, backend):
    """As `test_a_loop_that_ends_during_warm_up_ends_and_leaves_no_server` (test_sandbox_fork.py), for a
    pool of started sandboxes: short loops, each ending at another moment of its sandboxes' start."""
    done = warm_up_loops(tmp_path / "loops.py", f"SandboxPolicy(backend={backend!r}, warm=2)", 100, 0.002)
    assert done.returncode == 0 and done.stdout == b"ended with children: 0\n", (done.stdout, done.stderr[-2000:])
