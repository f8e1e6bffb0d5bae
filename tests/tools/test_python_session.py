"""Python sessions (`session: true`): one sandboxed interpreter per rollout, its state kept between
calls, ended cleanly by timeouts and crashes, and gone when the rollout ends. Every test runs with the
interpreter started each way this machine has: cold (no warm sandboxes), from the fork server (`auto`
with warm sandboxes), and from a pool of started bubblewrap sandboxes."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from graphrl.runtime.services import RolloutResources
from graphrl.tools.python_session import SESSION_CPU_S
from graphrl.tools.registry import ToolBox
from graphrl.tools.sandbox_host import SandboxPolicy, bubblewrap_works, fork_works, resolve_backend

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux")

_LINUX = sys.platform == "linux"
STARTS = {
    "cold": SandboxPolicy(),
    **({"fork": SandboxPolicy(warm=1)} if _LINUX and fork_works() else {}),
    **({"bubblewrap-pool": SandboxPolicy(backend="bubblewrap", warm=1)} if _LINUX and bubblewrap_works() else {}),
}
POLICY = SandboxPolicy()


@pytest.fixture(autouse=True, params=list(STARTS))
def start(request, monkeypatch):
    """The module's tools start their interpreters this way (`POLICY`, read by `box()`)."""
    monkeypatch.setattr(sys.modules[__name__], "POLICY", STARTS[request.param])
    return request.param


def box() -> ToolBox:
    return ToolBox(sandbox=POLICY)


def _ready(source) -> int:
    pool = getattr(source, "_ahead", source)  # a ForkServer makes its forks ahead in a SandboxPool
    return len(pool._ready)


async def _until(cond, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)


async def _warm_up(tools: ToolBox) -> None:
    """With warm sandboxes, one plain call first and a sandbox ready before the session's first cell (a
    pool fills only once it has been asked), so the warm variants really start their sessions warm."""
    if not POLICY.warm:
        return
    await tools.call("python", {"code": "pass"}, timeout=5, max_chars=None)
    source = await tools._pools.get()
    await _until(lambda: _ready(source) >= 1)


def cells(*codes: str, timeout: float = 5.0, resources: RolloutResources | None = None, close: bool = True):
    tools = box()
    res = resources or RolloutResources()

    async def go():
        await _warm_up(tools)
        out = [
            await tools.call("python", {"code": c, "session": True}, timeout=timeout, max_chars=None, resources=res)
            for c in codes
        ]
        if close:
            await res.close()
        await tools.close()
        return out

    return asyncio.run(go())


def test_variables_and_files_survive_between_calls_of_one_rollout():
    a, b, c = cells(
        "x = 41\nopen('notes.txt', 'w').write('kept')\nprint('set')",
        "x += 1\nprint(x, open('notes.txt').read())",
        "import os\nprint(sorted(f for f in os.listdir('.') if not f.startswith('.')))",
    )
    assert a.ok and a.text == "set\n" and a.data["fresh_session"] is True
    assert b.ok and b.text == "42 kept\n" and b.data["session_calls"] == 2
    assert c.text == "['main.py', 'notes.txt']\n"


def test_an_exception_is_an_observation_and_keeps_the_session():
    a, b, c = cells("y = 7", "1 / 0", "print(y)")
    assert not b.ok and b.error == "exception" and "ZeroDivisionError" in b.text
    assert 'File "<cell>", line 1' in b.text and "exec(compile" not in b.text  # the cell's traceback only
    assert c.ok and c.text == "7\n" and c.data["fresh_session"] is False


def test_a_timeout_ends_the_session_and_the_next_call_starts_fresh():
    a, b, c = cells("z = 1", "import time\ntime.sleep(30)", "print('z' in globals())", timeout=1.5)
    assert not b.ok and b.error == "timeout" and "session was stopped" in b.text
    assert c.ok and c.text == "False\n" and c.data["fresh_session"] is True


def test_an_interpreter_that_exits_ends_the_session_cleanly():
    a, b = cells("import os\nos._exit(3)", "print('again')")
    assert not a.ok and a.error == "session ended" and "exit status 3" in a.text
    assert b.ok and b.text == "again\n"


def test_output_of_a_cell_is_capped_and_the_session_goes_on():
    a, b = cells("print('x' * (3 << 20))", "print('ok')")
    assert not a.ok or a.text.endswith("cut]")
    assert len(a.text) < (1 << 20) + 200 and a.text.endswith("bytes: cut]")
    assert b.ok and b.text == "ok\n"


def test_two_rollouts_never_share_an_interpreter():
    r1, r2 = RolloutResources(), RolloutResources()
    tools = box()

    async def go():
        await tools.call("python", {"code": "secret = 'r1'", "session": True}, timeout=5, max_chars=None, resources=r1)
        seen = await tools.call(
            "python",
            {"code": "print(globals().get('secret'))", "session": True},
            timeout=5,
            max_chars=None,
            resources=r2,
        )
        await r1.close()
        await r2.close()
        await tools.close()
        return seen

    assert asyncio.run(go()).text == "None\n"


def _session_pids(workdir: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.readlink(f"/proc/{pid}/cwd").startswith(workdir):
                    out.append(int(pid))
            except OSError:
                pass
    return out


def test_closing_the_rollout_stops_the_interpreter_and_removes_its_files():
    res = RolloutResources()
    tools = box()

    async def go():
        a = await tools.call(
            "python",
            {"code": "import os\nprint(os.getcwd())", "session": True},
            timeout=5,
            max_chars=None,
            resources=res,
        )
        workdir = a.text.strip()
        alive = Path(workdir).exists() and bool(_session_pids(workdir))
        await res.close()
        await tools.close()
        return workdir, alive

    workdir, alive = asyncio.run(go())
    assert alive, "the session should have been running before the close"
    assert not Path(workdir).exists()
    assert not _session_pids(workdir)


def test_without_a_rollout_a_session_is_refused():
    res = asyncio.run(box().call("python", {"code": "1", "session": True}, timeout=5, max_chars=None))
    assert not res.ok and "no rollout" in res.text


def test_code_forging_the_session_channel_ends_the_session_and_nothing_more():
    """The driver answers on a copy of stdout the code can find; a forged reply claiming a huge
    body must not make graphrl read (or hold) it: the session ends, the next call starts fresh."""
    forge = (
        "import os\n"
        "for fd in range(3, 20):\n"
        "    try:\n"
        '        os.write(fd, b\'{"status": 0, "size": 4000000000, "more": false}\\n\' + b\'x\' * 100)\n'
        "    except OSError:\n"
        "        pass\n"
        "import time\ntime.sleep(0.2)\n"
    )
    a, b = cells(forge, "print('fresh', 'x' in globals())")
    assert not a.ok and a.error == "session ended" and "4000000000" in a.text
    assert b.ok and b.text == "fresh False\n"


def test_a_cell_reading_stdin_gets_eof_not_the_next_cell():
    a, b = cells("import sys\nprint(repr(sys.stdin.read()))", "print('second ran')")
    assert a.ok and a.text == "''\n"
    assert b.ok and b.text == "second ran\n"


def test_the_interpreter_starts_as_the_policy_says_and_a_warm_one_is_replaced(start):
    """Warm (fork server or pool), the session takes a started sandbox as a one-shot call does, its
    report saying the session's CPU limit, and the source makes a replacement once the first cell is
    done; cold, the sandbox is launched as `auto` without warm sandboxes would."""
    res = RolloutResources()
    tools = box()

    async def go():
        try:
            await _warm_up(tools)
            source = await tools._pools.get() if POLICY.warm else None
            served0 = source.served if source is not None else 0
            a = await tools.call("python", {"code": "x = 1", "session": True}, timeout=5, max_chars=None, resources=res)
            cell = "import resource\nprint(x)\nprint(resource.getrlimit(resource.RLIMIT_CPU))"
            b = await tools.call("python", {"code": cell, "session": True}, timeout=5, max_chars=None, resources=res)
            if source is None:
                return a, b, 0, 0
            taken = source.served - served0
            await _until(lambda: _ready(source) == 1)
            return a, b, taken, _ready(source)
        finally:
            await res.close()
            await tools.close()

    a, b, taken, ready = asyncio.run(go())
    assert a.ok and b.ok and b.text.splitlines()[0] == "1" and b.data["fresh_session"] is False
    assert b.text.splitlines()[1] == f"({SESSION_CPU_S}, {SESSION_CPU_S + 1})"  # the limit in force
    report = b.data["sandbox"]
    assert report["rlimits"]["cpu_s"] == SESSION_CPU_S
    if start == "cold":
        assert report["backend"] == resolve_backend(SandboxPolicy(warm=0))
    else:
        assert report["backend"] == resolve_backend(POLICY)
        assert taken == 1, "the session (two cells) should take one warm sandbox"
        assert ready == 1, "the warm source should have replaced the sandbox the session took"


def test_a_cell_cancelled_mid_run_ends_the_session_and_its_reply_never_reaches_the_next_cell():
    """The caller (a rollout deadline) cancels a cell that is still running: its interpreter would
    answer later, so the session ends there; the next cell gets a fresh interpreter and its own reply."""
    res = RolloutResources()
    tools = box()

    async def go():
        try:
            await _warm_up(tools)
            first = asyncio.create_task(
                tools.call(
                    "python",
                    {"code": "x = 1\nimport time\ntime.sleep(0.6)\nprint('first')", "session": True},
                    timeout=10,
                    max_chars=None,
                    resources=res,
                )
            )
            await asyncio.sleep(0.3)  # the cell is running
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            await asyncio.sleep(0.6)  # where the old interpreter would have answered
            return await tools.call(
                "python", {"code": "print('second', 'x' in globals())", "session": True},
                timeout=5, max_chars=None, resources=res,
            )  # fmt: skip
        finally:
            await res.close()
            await tools.close()

    second = asyncio.run(go())
    assert second.ok and second.text == "second False\n", second.text
    assert second.data["fresh_session"] is True


def test_sessions_alone_keep_a_pool_filled_after_it_lost_a_sandbox(start):
    """A pool refills when a call ends; with only sessions calling (each taking its interpreter once),
    a waiting sandbox killed from outside must still be replaced, not leave every later session cold."""
    if start != "bubblewrap-pool":
        pytest.skip("a pool of started sandboxes only (the fork server forks on demand)")
    tools = box()

    async def go():
        try:
            await _warm_up(tools)
            pool = await tools._pools.get()
            waiting = pool._ready[0]
            os.killpg(waiting.proc.pid, 9)  # a waiting sandbox dies (an OOM kill, an operator)
            await waiting.proc.wait()
            for _ in range(2):  # session-only rollouts
                res = RolloutResources()
                out = await tools.call(
                    "python", {"code": "print(1)", "session": True}, timeout=5, max_chars=None, resources=res
                )
                assert out.ok, out.text
                await res.close()
            await _until(lambda: _ready(pool) >= 1)
            return _ready(pool)
        finally:
            await tools.close()

    assert asyncio.run(go()) >= 1, "the pool should have been refilled by the sessions"
