"""The fork server (`sandbox_fork.ForkServer`): each call is a fork of one waiting interpreter,
isolated by the launcher's own steps. What must hold beyond the escape suite (which runs against it as
backend "fork") and the warm/cold comparison (`test_sandbox_pool.py`): nothing crosses calls, the code
cannot reach the server, a dead server is replaced, a cancelled call and a closed server leave
nothing behind, and `ToolBox` uses it where `auto` resolves to it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from graphrl.tools import sandbox_fork, sandbox_host
from graphrl.tools.python_exec import run_python
from graphrl.tools.sandbox_fork import ForkServer
from graphrl.tools.sandbox_host import SandboxPolicy, fork_works, resolve_backend

sys.path.insert(0, str(Path(__file__).parent))
from sandbox_procs import leftovers, no_leftovers, warm_up_loops

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not fork_works(), reason="the fork server needs Linux namespaces"
)
POLICY = SandboxPolicy(backend="fork", warm=2)


def _calls_of_one_server(policy: SandboxPolicy, code: str, n: int) -> list:
    """`n` calls of `code`, one after the other, through one fork server (closed after)."""

    async def go():
        server = ForkServer(policy)
        try:
            return [await run_python(code, timeout=5, policy=policy, warm=server) for _ in range(n)]
        finally:
            await server.close()

    return asyncio.run(go())


def test_nothing_of_one_call_reaches_the_next():
    """Files (work directory, /dev/shm), environment, interpreter state: each call is a fresh fork
    with a fresh tmpfs, so the second call sees none of what the first changed."""
    first = (
        "import os, sys, json\n"
        "open('mark', 'w').write('1')\n"
        "open('/dev/shm/mark', 'w').write('1')\n"
        "os.environ['MARK'] = '1'\n"
        "sys.modules['json'].MARK = 1\n"
        "sys.setrecursionlimit(123)\n"
        "print('wrote')"
    )
    second = (
        "import os, sys, json\n"
        "print(os.path.exists('mark'), os.path.exists('/dev/shm/mark'), 'MARK' in os.environ,\n"
        "      hasattr(json, 'MARK'), sys.getrecursionlimit() == 123, 'json' in sys.modules)"
    )

    async def go():
        server = ForkServer(POLICY)
        try:
            a = await run_python(first, timeout=5, policy=POLICY, warm=server)
            b = await run_python(second, timeout=5, policy=POLICY, warm=server)
            return a, b, server.served
        finally:
            await server.close()

    a, b, served = asyncio.run(go())
    assert a.ok and a.text == "wrote\n", a.text
    assert b.ok and b.text == "False False False False False True\n", b.text
    assert served == 2


def test_the_code_holds_only_its_own_streams_not_the_servers_socket():
    code = "import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))"

    async def go():
        server = ForkServer(POLICY)
        try:
            return await run_python(code, timeout=5, policy=POLICY, warm=server)
        finally:
            await server.close()

    res = asyncio.run(go())
    assert res.ok and res.text == "[0, 1, 2, 3]\n", res.text  # 3: the directory listdir reads


def test_calls_of_one_server_share_its_hash_seed_as_documented():
    """The one documented difference of a fork: str hashes are the server's, the same for every call
    it serves (a cold call draws its own seed)."""
    code = "print(hash('graphrl'))"

    a, b = _calls_of_one_server(POLICY, code, 2)
    assert a.ok and b.ok and a.text == b.text


def test_a_server_killed_from_outside_is_replaced():
    async def go():
        server = ForkServer(SandboxPolicy(backend="fork"))
        try:
            a = await run_python("print(1)", timeout=5, policy=server.policy, warm=server)
            (first,) = server._servers.values()
            assert first.proc is not None
            os.killpg(first.proc.pid, signal.SIGKILL)
            await first.proc.wait()
            b = await run_python("print(2)", timeout=5, policy=server.policy, warm=server)
            (second,) = server._servers.values()
            return a, b, first is not second, server.served
        finally:
            await server.close()

    a, b, replaced, served = asyncio.run(go())
    assert a.text == "1\n" and b.text == "2\n" and replaced and served == 2


def test_one_failed_fork_sends_its_call_cold_and_leaves_the_server_serving(monkeypatch):
    """A fork that fails on graphrl's side (here: its work directory and cgroups cannot be had) must
    not retire the server: the calls it is serving would die with it (found by review)."""
    policy = SandboxPolicy(backend="fork")
    failures = []

    def failing_once(real):
        def take():
            if not failures:
                failures.append(1)
                raise OSError("no cgroup for you")
            return real()

        return take

    async def go():
        server = ForkServer(policy)
        try:
            await run_python("pass", timeout=5, policy=policy, warm=server)  # the server is up
            (first,) = server._servers.values()
            slow = asyncio.create_task(
                run_python("import time; time.sleep(1.0); print('slow done')", timeout=10, policy=policy, warm=server)
            )
            await asyncio.sleep(0.3)  # the slow call is running in its fork
            monkeypatch.setattr(first.recycler, "take", failing_once(first.recycler.take))
            cold = await run_python("print('cold')", timeout=5, policy=policy, warm=server)
            (second,) = server._servers.values()
            return await slow, cold, first is second, server.missed
        finally:
            await server.close()

    slow, cold, same, missed = asyncio.run(go())
    assert failures and missed == 1
    assert cold.ok and cold.text == "cold\n" and cold.data["sandbox"]["backend"] == "launcher"
    assert slow.ok and slow.text == "slow done\n", slow.text
    assert same


def _record(monkeypatch) -> tuple[list[str], list[str]]:
    made: list[str] = []
    groups: list[str] = []
    real_workdir, real_cgroups = sandbox_host.make_workdir, sandbox_host.make_cgroups

    def cgroups(policy):
        got = real_cgroups(policy)
        groups.extend(g["path"] for g in got)
        return got

    workdir = lambda: made.append(real_workdir()) or made[-1]
    monkeypatch.setattr(sandbox_fork, "make_workdir", workdir)  # the server's home
    monkeypatch.setattr(sandbox_host, "make_workdir", workdir)  # the calls' (`Recycler`)
    monkeypatch.setattr(sandbox_host, "make_cgroups", cgroups)
    return made, groups


def test_close_leaves_no_process_directory_or_cgroup(monkeypatch):
    made, groups = _record(monkeypatch)

    async def go():
        server = ForkServer(POLICY)
        await run_python("print(1)", timeout=5, policy=POLICY, warm=server)
        await asyncio.sleep(0.5)  # forks made ahead, waiting
        waiting = len(server._ahead._ready)
        pids = [s.proc.pid for s in server._servers.values() if s.proc is not None]
        await server.close()
        return waiting, pids

    waiting, pids = asyncio.run(go())
    assert waiting == 2
    assert no_leftovers(*made), [pid for w in made for pid in leftovers(w)]
    assert not [w for w in made if os.path.exists(w)]
    assert not [g for g in groups if os.path.exists(g)]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_call_cancelled_at_any_moment_leaves_nothing(monkeypatch):
    made, groups = _record(monkeypatch)
    policy = SandboxPolicy(backend="fork")

    async def go():
        server = ForkServer(policy)
        try:
            await run_python("pass", timeout=5, policy=policy, warm=server)  # the server is up
            for i in range(40):
                task = asyncio.create_task(
                    run_python("import time; time.sleep(30)", timeout=40, policy=policy, warm=server)
                )
                await asyncio.sleep(0.001 * (i % 20))
                task.cancel()
                try:
                    await asyncio.wait_for(task, 10)
                except asyncio.CancelledError:
                    pass
        finally:
            await server.close()

    asyncio.run(go())
    assert no_leftovers(*made), [pid for w in made for pid in leftovers(w)]
    assert not [w for w in made if os.path.exists(w)]
    assert not [g for g in groups if os.path.exists(g)]


def test_auto_with_warm_sandboxes_resolves_to_the_fork_server_and_the_toolbox_uses_it():
    from graphrl.tools.registry import ToolBox

    assert resolve_backend(SandboxPolicy(warm=2)) == "fork"
    assert resolve_backend(SandboxPolicy(warm=0)) != "fork"  # no warm sandboxes: every call cold, as before
    box = ToolBox(sandbox=SandboxPolicy(warm=1))

    async def go():
        try:
            res = await box.call("python", {"code": "print(1)"}, timeout=5, max_chars=None)
            source = await box._pools.get()
            return res, source
        finally:
            await box.close()

    res, source = asyncio.run(go())
    assert res.ok and res.data["sandbox"]["backend"] == "fork"
    assert isinstance(source, ForkServer) and source.served == 1 and source.closed


def test_warm_up_starts_the_server_and_a_fork_before_the_first_call():
    """`ToolBox.warm_up` (the executor calls it as each rollout starts): the one-time set-up, the fork
    server and its first fork are made in the background, so the first call takes a fork made ahead
    instead of waiting for the server's start; once per event loop; nothing for graphs without python."""
    from graphrl.tools.registry import ToolBox

    box = ToolBox(sandbox=SandboxPolicy(warm=1))

    async def go():
        try:
            box.warm_up({"retrieve"})
            none = len(box._preparing)
            box.warm_up({"python", "retrieve"})
            box.warm_up({"python"})  # the same loop: nothing more
            started = len(box._preparing)
            await asyncio.gather(*box._preparing)
            source = await box._pools.get()
            for _ in range(500):  # the first fork, made ahead
                if source._ahead._ready:
                    break
                await asyncio.sleep(0.01)
            ready = len(source._ahead._ready)
            res = await box.call("python", {"code": "print(1)"}, timeout=5, max_chars=None)
            return none, started, ready, res, source
        finally:
            await box.close()

    none, started, ready, res, source = asyncio.run(go())
    assert (none, started, ready) == (0, 1, 1)
    assert res.ok and res.text == "1\n" and res.data["sandbox"]["backend"] == "fork"
    assert source._ahead.served == 1 and source.missed == 0  # the call took the fork made ahead
    assert not box._preparing and source.closed


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.1, 0.3])
def test_close_during_warm_up_leaves_no_process_directory_or_cgroup(monkeypatch, delay):
    """Closed in the set-up, while the server starts, while it forks, or after."""
    from graphrl.tools.registry import ToolBox

    made, groups = _record(monkeypatch)
    box = ToolBox(sandbox=SandboxPolicy(warm=2))

    async def go():
        box.warm_up({"python"})
        await asyncio.sleep(delay)
        await box.close()
        return len(box._preparing)

    assert asyncio.run(go()) == 0
    assert no_leftovers(*made), [pid for w in made for pid in leftovers(w)]
    assert not [w for w in made if os.path.exists(w)]
    assert not [g for g in groups if os.path.exists(g)]


def test_a_loop_that_ends_during_warm_up_ends_and_leaves_no_server(tmp_path):
    """`asyncio.run` ends by cancelling every task, the server's start included. Started through
    asyncio's subprocess transport, a start cancelled before the transport had set itself up never
    finished closing on Python 3.11, and `asyncio.run` never returned (seen about once in 40 loops
    with other processes busy). Many short loops, each ending at another moment of the warm-up (the
    set-up, the server's start, its first fork), in a child process given 120 s."""
    done = warm_up_loops(tmp_path / "loops.py", "SandboxPolicy(warm=1)", 200, 0.0015)
    assert done.returncode == 0 and done.stdout == b"ended with children: 0\n", (done.stdout, done.stderr[-2000:])


def test_a_session_with_no_warm_source_starts_as_auto_would_without_warm_sandboxes():
    """A session given no warm source (and a call the server did not serve) starts cold: with `auto`
    that is bubblewrap where it works, not the launcher the fork server's sandbox is made of. (Through
    a ToolBox with warm sandboxes a session takes a fork: tests/tools/test_python_session.py.)"""
    from graphrl.tools.python_session import PythonSession

    policy = SandboxPolicy(warm=2)

    async def go():
        session = PythonSession(policy)
        try:
            return await session.call("x = 1\nprint(x)", timeout=10)
        finally:
            await session.close()

    res = asyncio.run(go())
    assert res.ok and res.text == "1\n", res.text
    assert res.data["sandbox"]["backend"] == resolve_backend(SandboxPolicy(warm=0))


def test_calls_work_when_the_process_has_more_than_1024_files_open():
    """A rollout process at high concurrency holds well over 1,024 descriptors (sockets, pipes): the
    fork server's own socket then gets a number `select()` refuses. Found by the full benchmark (every
    python call at concurrency 512 failed with "filedescriptor out of range in select()")."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1400
    if soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {want}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    held = []
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        held.append(null)
        while held[-1] < 1100:
            held.append(os.dup(null))

        async def go():
            server = ForkServer(POLICY)
            try:
                res = [await run_python(f"print({i} * 3)", timeout=5, policy=POLICY, warm=server) for i in range(3)]
                (srv,) = server._servers.values()
                assert srv.sock is not None and srv.sock.fileno() > 1024  # the case under test
                return res, server.served
            finally:
                await server.close()

        res, served = asyncio.run(go())
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [r.text for r in res] == ["0\n", "3\n", "6\n"] and served == 3


def test_a_call_reuses_the_work_directory_and_cgroups_the_last_one_left_empty(monkeypatch):
    """`sandbox_host.Recycler`: the next call gets the same (empty) work directory and cgroups, with
    nothing of the last call in them; close removes them."""
    made, groups = _record(monkeypatch)
    policy = SandboxPolicy(backend="fork")
    code = (
        "import os\n"
        "print(os.getcwd())\n"
        "print(sorted(os.listdir('.')), os.path.exists('/dev/shm/mark'))\n"
        "print(sorted(line.split(':', 2)[2] for line in open('/proc/self/cgroup') if 'graphrl' in line))\n"
        "open('mark', 'w').write('1'); open('/dev/shm/mark', 'w').write('1')"
    )

    runs = _calls_of_one_server(policy, code, 3)
    assert all(r.ok for r in runs), [r.text for r in runs]
    assert len({r.text for r in runs}) == 1, [r.text for r in runs]  # the same directory and cgroups each time
    cwd, contents, cgroups = runs[0].text.splitlines()
    assert contents == "['main.py'] False"  # nothing the last call wrote
    assert made.count(cwd) == 1  # made once for the three calls
    if groups:  # root with writable cgroups: one set (a group per hierarchy), made once, in every call
        names = {g.rsplit("/", 1)[1] for g in groups}
        assert len(names) == 1 and names.pop() in cgroups, (groups, cgroups)
    assert not [w for w in made if os.path.exists(w)]
    assert not [g for g in groups if os.path.exists(g)]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_forks_made_ahead_and_never_used_leave_no_descriptor_open():
    """Closing a server whose forks wait unused (and disposing of them) closes their pipe ends too."""

    async def round_trip():
        server = ForkServer(POLICY)
        await run_python("print(1)", timeout=5, policy=POLICY, warm=server)
        await asyncio.sleep(0.5)  # two forks made ahead, waiting
        assert len(server._ahead._ready) == 2
        await server.close()

    async def go():
        await round_trip()  # the loop's own descriptors, opened once
        before = _open_fds()
        for _ in range(3):
            await round_trip()
        return before, _open_fds()

    before, after = asyncio.run(go())
    assert after == before


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are made as root only")
def test_a_cgroup_is_handed_out_again_only_with_nothing_counted_in_it():
    """After killed calls (timeout), every set the recycler hands out has pids.current 0: a zombie of a
    killed call is not in cgroup.procs but still counts against pids.max (found by review: the next
    call could start fewer processes than a cold one)."""
    policy = SandboxPolicy(backend="fork")
    handed: list[str] = []

    async def go():
        server = ForkServer(policy)
        try:
            await run_python("pass", timeout=5, policy=policy, warm=server)
            (srv,) = server._servers.values()
            real = srv.recycler.take

            def take():
                workdir, groups = real()
                for group in groups:
                    if group["kind"] in ("pids", "unified"):
                        handed.append(Path(group["path"], "pids.current").read_text().strip())
                return workdir, groups

            srv.recycler.take = take  # type: ignore[method-assign]
            for _ in range(3):
                killed = await run_python("import time; time.sleep(30)", timeout=0.5, policy=policy, warm=server)
                assert killed.error == "timeout"
                for _ in range(3):
                    assert (await run_python("print(1)", timeout=5, policy=policy, warm=server)).ok
        finally:
            await server.close()

    asyncio.run(go())
    if not handed:
        pytest.skip("no pids cgroup here")
    assert set(handed) == {"0"}, handed
