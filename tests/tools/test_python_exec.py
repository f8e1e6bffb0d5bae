"""The python sandbox: a subprocess in a fresh temp dir, scrubbed env, limits, process group killed on timeout."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import pytest
from sandbox_procs import run_loops

from graphrl.tools.python_exec import run_python
from graphrl.tools.sandbox_host import bubblewrap_works


def py(code, **kw):
    return asyncio.run(run_python(code, **kw))


def test_stdout_and_stderr_are_captured():
    res = py("import sys\nprint('hello', 6 * 7)\nprint('warn', file=sys.stderr)")
    assert res.ok and res.error is None
    assert "hello 42\n" in res.text and "warn\n" in res.text


def test_stdin_is_passed():
    assert py("print(input()[::-1])", stdin="abc").text == "cba\n"


def test_non_zero_exit_is_not_ok_and_keeps_the_output():
    res = py("print('before')\nraise SystemExit(3)")
    assert not res.ok and res.error == "exit status 3" and res.text == "before\n"
    res = py("1/0")
    assert not res.ok and "ZeroDivisionError" in res.text
    res = py("import sys; sys.exit(2)")
    assert not res.ok and res.text == "[exit status 2]"


def test_the_temp_dir_is_fresh_and_removed():
    res = py("import os\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))")
    assert res.ok
    cwd, listing = res.text.splitlines()
    assert listing == "['main.py']"
    workdir = Path(cwd)
    assert workdir.name.startswith("graphrl-py-") and not workdir.exists()


def test_the_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("GRAPHRL_SECRET_FOR_TESTS", "s3cret")
    res = py("import os\nprint(os.environ.get('GRAPHRL_SECRET_FOR_TESTS'))\nprint(os.environ['HOME'] == os.getcwd())")
    assert res.ok and res.text == "None\nTrue\n"
    assert "s3cret" not in py("import os\nprint(dict(os.environ))").text


def _processes_of(workdir: str, token: str) -> list[int]:
    """Host pids whose cwd is inside `workdir` or whose command line holds `token` (zombies excluded).

    Pids printed by the code itself are no use: with a pid namespace they are the namespace's own."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if "Z" in next(line for line in (entry / "status").read_text().splitlines() if line.startswith("State:")):
                continue
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, StopIteration):
            continue
        if cwd.startswith(workdir) or token in cmdline:
            found.append(int(entry.name))
    return found


def test_timeout_kills_the_whole_process_group_and_removes_the_dir():
    token = f"graphrl-sleeper-{os.getpid()}-{time.monotonic_ns()}"
    code = (
        "import os, subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', {token!r}])\n"
        "print(os.getcwd(), flush=True)\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = py(code, timeout=1.5)
    assert time.monotonic() - t0 < 5
    assert not res.ok and res.error == "timeout" and "timed out after 1.5 s" in res.text
    workdir = res.text.splitlines()[0]  # output printed before the timeout is kept
    assert workdir.startswith(tempfile.gettempdir())
    deadline = time.monotonic() + 5
    while _processes_of(workdir, token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_of(workdir, token) == []
    assert not Path(workdir).exists()


def test_file_size_limit_stops_huge_writes():
    res = py("open('big', 'wb').write(b'0' * (64 << 20))\nprint('wrote')")
    assert not res.ok and "wrote" not in res.text


def test_the_event_loop_keeps_running_while_code_runs():
    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        t = asyncio.create_task(ticker())
        res = await run_python("import time; time.sleep(0.6); print('done')", timeout=5)
        t.cancel()
        return res, ticks

    res, ticks = asyncio.run(main())
    assert res.ok and ticks >= 5


@pytest.mark.parametrize("backend", ["launcher", "bubblewrap"])
def test_a_loop_that_ends_during_a_cold_call_ends_and_leaves_no_process(tmp_path, backend):
    """`asyncio.run` ends by cancelling every task, a python call still starting its sandbox included.
    Started through asyncio's subprocess transport, a start cancelled before the transport had set
    itself up never finished closing on Python 3.11, and `asyncio.run` never returned. Sandboxes are
    started by `subprocess.Popen` now (`piped_process.spawn`). Many short loops, each ending at another
    moment of a cold call (its set-up, the start, the program's run), in a child process given 120 s,
    which then counts its own child processes, zombies included: none may be left or unreaped."""
    if backend == "bubblewrap" and not bubblewrap_works():
        pytest.skip("bubblewrap does not work here")
    done = run_loops(
        tmp_path / "loops.py",
        "import asyncio\n"
        "from graphrl.tools.python_exec import run_python\n"
        "from graphrl.tools.sandbox_host import SandboxPolicy\n"
        f"policy = SandboxPolicy(backend={backend!r}, warm=0)\n"
        "async def main(delay):\n"
        "    asyncio.ensure_future(run_python('print(1)', policy=policy))\n"
        "    await asyncio.sleep(delay)\n"
        "for i in range(120):\n"
        "    asyncio.run(main((i % 40) * 0.001))\n",
    )
    assert done.returncode == 0 and done.stdout == b"ended with children: 0\n", (done.stdout, done.stderr[-2000:])
