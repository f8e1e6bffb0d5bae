"""Python sessions: one sandboxed interpreter per rollout that keeps its variables and files between calls.

Input: code cells, one per `python` tool call with `session: true`. Output: a `ToolResult` per cell:
`text` = what the cell printed (stdout + stderr, its subprocesses' too, cut at `OUTPUT_CAP`),
`ok` = the cell raised nothing (an uncaught exception prints its traceback, as a script would),
`data` = {"exit_status": 0 | 1, "session_calls": n, "sandbox": report}.

The interpreter is a sandbox as a one-shot call's (the same backends and limits; its CPU limit is
`SESSION_CPU_S` over the whole session): taken from the ToolBox's warm source (the fork server, or a
pool of started sandboxes) when one is ready, as a one-shot call's is, else started by
`python_exec.launch`. It runs `DRIVER`, a small loop that
reads length-prefixed cells on stdin, runs each with `exec` in one namespace, and answers on a private
copy of the original stdout. A cell that times out, overflows its output or ends the interpreter
(`os._exit`, a crash) ends the session: the observation says so and the next cell starts a fresh one
(state lost, said in its `data`). A cell cancelled while it runs (a deadline around the call) ends
the session too, so that its late reply never reaches the next cell. `close()` (at the rollout's end)
stops it and removes its files.
"""

from __future__ import annotations

import asyncio
import json

from ..runtime.deadline import within
from ..runtime.services import ToolResult
from .python_exec import OUTPUT_CAP, Launched, SandboxPolicy, WarmSource, dispose, launch, read_report, take_warm

SESSION_CPU_S = 600  # CPU seconds for the whole session (each cell also has its node's wall timeout)

# Runs inside the sandbox (python -I main.py). Protocol: parent -> "<n>\n" + n bytes of code;
# driver -> one JSON line {"status": 0|1, "size": m, "more": bool} + m bytes of output.
DRIVER = (
    r"""
import json, os, sys, traceback
CAP = %d
chan = os.fdopen(os.dup(1), "wb", buffering=0)
inp = os.fdopen(os.dup(0), "rb")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)  # a cell that reads stdin gets EOF, never the next cell's code
sys.stdin = open(0, "r", closefd=False)
ns = {"__name__": "__main__", "__builtins__": __builtins__}
while True:
    header = inp.readline()
    if not header:
        break
    code = inp.read(int(header)).decode("utf-8", "replace")
    out = os.open(".graphrl-cell-out", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush(); sys.stderr.flush()
    os.dup2(out, 1); os.dup2(out, 2)
    status = 0
    try:
        exec(compile(code, "<cell>", "exec"), ns)
    except SystemExit as exc:
        status = 0 if exc.code in (None, 0) else 1
    except BaseException as exc:  # the traceback starts at the cell, as a script's would
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
        status = 1
    sys.stdout.flush(); sys.stderr.flush()
    size = os.lseek(out, 0, os.SEEK_END)
    os.lseek(out, 0, os.SEEK_SET)
    body = os.read(out, min(size, CAP))
    os.close(out)
    chan.write((json.dumps({"status": status, "size": len(body), "more": size > CAP}) + "\n").encode() + body)
"""
    % OUTPUT_CAP
)
_DRIVER_RAW = DRIVER.encode("utf-8")


class PythonSession:
    """One rollout's interpreter. Not shared between rollouts; cells run one at a time."""

    def __init__(self, policy: SandboxPolicy, warm: WarmSource | None = None):
        self._policy = policy
        self._warm = warm
        self._run: Launched | None = None
        self._lock = asyncio.Lock()
        self.calls = 0  # cells run by the current interpreter
        self.restarts = 0  # interpreters that ended before the rollout did

    async def call(self, code: str, *, timeout: float) -> ToolResult:
        async with self._lock:
            fresh = self._run is None
            starter = b""
            if fresh:
                self._run, starter = await self._start()
                self.calls = 0
            run = self._run
            assert run is not None
            try:
                status, body, more = await within(self._exchange(run, code, starter), timeout)
            except asyncio.TimeoutError:
                return await self._end(f"[timed out after {timeout:g} s: the session was stopped]", "timeout")
            except (ConnectionError, EOFError, ValueError, KeyError, TypeError) as exc:
                return await self._end(f"[the session's interpreter ended ({exc}): its state is lost]", "session ended")
            except asyncio.CancelledError:
                # cancelled mid-cell (the rollout's deadline, the caller): the interpreter may still be
                # running the cell and answer later, so it is never handed the next cell
                if self._run is not None:
                    self.restarts += 1
                    await asyncio.shield(self._drop())
                raise
            finally:
                if fresh and self._warm is not None:
                    self._warm.refill()  # as for a one-shot call: replacements start once the cell is done
            self.calls += 1
            text = body.decode("utf-8", errors="replace")
            data: dict = {"exit_status": status, "session_calls": self.calls, "fresh_session": fresh}
            data["sandbox"] = read_report(run)
            if more:
                note = f"[output passed {OUTPUT_CAP} bytes: cut]"
                text += ("" if not text or text.endswith("\n") else "\n") + note
            return ToolResult(text, ok=status == 0, error=None if status == 0 else "exception", data=data)

    async def _start(self) -> tuple[Launched, bytes]:
        """A new interpreter: a warm sandbox and the bytes that start `DRIVER` in it, or one started cold
        (already running `DRIVER`: no bytes)."""
        taken = None
        if self._warm is not None:
            taken = await take_warm(self._warm, self._policy, _DRIVER_RAW, SESSION_CPU_S)
        if taken is None:
            taken = await launch(DRIVER, cpu_s=SESSION_CPU_S, policy=self._policy), b""
        try:
            await taken[0].proc.connect()  # streams for the cells
        except BaseException:
            await dispose(taken[0])
            raise
        return taken

    async def _exchange(self, run: Launched, code: str, starter: bytes) -> tuple[int, bytes, bool]:
        assert run.proc.stdin is not None and run.proc.stdout is not None
        raw = code.encode("utf-8")
        run.proc.stdin.write(starter + b"%d\n" % len(raw) + raw)
        await run.proc.stdin.drain()
        line = await run.proc.stdout.readline()
        if not line:
            raise EOFError(f"exit status {await run.proc.wait()}")
        if not line.startswith(b"{"):  # the interpreter or the sandbox said something before the cell ran
            raise EOFError(line.decode("utf-8", "replace").strip()[:300])
        head = json.loads(line)
        size = int(head["size"])
        if not 0 <= size <= OUTPUT_CAP:  # the code can write to the channel too: never trust a size
            raise ValueError(f"a reply of {size} bytes on the session channel (at most {OUTPUT_CAP})")
        body = await run.proc.stdout.readexactly(size) if size else b""
        return int(head["status"]), body, bool(head["more"])

    async def _end(self, text: str, error: str) -> ToolResult:
        report = await self._drop()
        self.restarts += 1
        return ToolResult(text, ok=False, error=error, data={"exit_status": None, "sandbox": report})

    async def _drop(self) -> dict:
        """Stop and remove the current interpreter, if any; its sandbox report ({} without one)."""
        run, self._run = self._run, None
        if run is None:
            return {}
        report = read_report(run)
        await dispose(run)
        return report

    async def close(self) -> None:
        async with self._lock:
            await self._drop()
