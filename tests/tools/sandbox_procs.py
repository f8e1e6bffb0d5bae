"""Helpers for the sandbox tests (not a test module): which host processes a call left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def leftovers(workdir: str) -> list[int]:
    """Host pids (not zombies) whose working directory is `workdir` or inside it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = next(x for x in (entry / "status").read_text().splitlines() if x.startswith("State:"))
                if "Z" not in state and os.readlink(entry / "cwd").startswith(workdir):
                    found.append(int(entry.name))
            except (OSError, StopIteration):
                pass
    return found


def no_leftovers(*workdirs: str, within: float = 5.0) -> bool:
    """Whether, within `within` seconds, no process is left in any of `workdirs`."""
    deadline = time.monotonic() + within
    while any(leftovers(w) for w in workdirs) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(leftovers(w) for w in workdirs)


_COUNT_CHILDREN = (
    "def _children():  # this process's child processes, zombies included: not ended, or not reaped\n"
    "    import os\n"
    "    from pathlib import Path\n"
    "    found = 0\n"
    "    for entry in Path('/proc').iterdir():\n"
    "        try:\n"
    "            found += entry.name.isdigit() and int((entry / 'stat').read_text().rsplit(')', 1)[1].split()[1]) == os.getpid()\n"
    "        except (OSError, IndexError, ValueError):\n"
    "            pass\n"
    "    return found\n"
)


def run_loops(script: Path, body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `body` as a script in a child interpreter (this checkout on its path, at most `timeout` s);
    the script's last line prints "ended with children: N", N its own child processes left."""
    script.write_text(body + _COUNT_CHILDREN + "print('ended with children:', _children(), flush=True)\n")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run([sys.executable, str(script)], cwd=repo, env=env, capture_output=True, timeout=timeout)


def warm_up_loops(script: Path, policy: str, loops: int, step_s: float) -> subprocess.CompletedProcess:
    """`run_loops` of `loops` short event loops, each starting a new ToolBox(sandbox=`policy`, the
    SandboxPolicy(...) call as source)'s warm-up and ending after (i % 50) x `step_s` seconds."""
    return run_loops(
        script,
        "import asyncio\n"
        "from graphrl.tools.registry import ToolBox\n"
        "from graphrl.tools.sandbox_host import SandboxPolicy\n"
        "async def main(box, delay):\n"
        "    box.warm_up({'python'})\n"
        "    await asyncio.sleep(delay)\n"
        f"for i in range({loops}):\n"
        f"    box = ToolBox(sandbox={policy})\n"
        f"    asyncio.run(main(box, (i % 50) * {step_s!r}))\n",
    )
