"""Python sessions (`session: true`): one sandboxed interpreter per rollout, its state kept between
calls, ended cleanly by timeouts and crashes, and gone when the rollout ends."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from graphrl.runtime.services import RolloutResources
from graphrl.tools.registry import ToolBox
from graphrl.tools.sandbox_host import SandboxPolicy

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux")


def cells(*codes: str, timeout: float = 5.0, resources: RolloutResources | None = None, close: bool = True):
    box = ToolBox(sandbox=SandboxPolicy())
    res = resources or RolloutResources()

    async def go():
        out = [
            await box.call("python", {"code": c, "session": True}, timeout=timeout, max_chars=None, resources=res)
            for c in codes
        ]
        if close:
            await res.close()
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
    box = ToolBox()

    async def go():
        await box.call("python", {"code": "secret = 'r1'", "session": True}, timeout=5, max_chars=None, resources=r1)
        seen = await box.call(
            "python",
            {"code": "print(globals().get('secret'))", "session": True},
            timeout=5,
            max_chars=None,
            resources=r2,
        )
        await r1.close()
        await r2.close()
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
    box = ToolBox()

    async def go():
        a = await box.call(
            "python",
            {"code": "import os\nprint(os.getcwd())", "session": True},
            timeout=5,
            max_chars=None,
            resources=res,
        )
        workdir = a.text.strip()
        alive = Path(workdir).exists() and bool(_session_pids(workdir))
        await res.close()
        return workdir, alive

    workdir, alive = asyncio.run(go())
    assert alive, "the session should have been running before the close"
    assert not Path(workdir).exists()
    assert not _session_pids(workdir)


def test_without_a_rollout_a_session_is_refused():
    res = asyncio.run(ToolBox().call("python", {"code": "1", "session": True}, timeout=5, max_chars=None))
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
