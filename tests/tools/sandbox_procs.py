"""Helpers for the sandbox tests (not a test module): which host processes a call left behind."""

from __future__ import annotations

import os
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
