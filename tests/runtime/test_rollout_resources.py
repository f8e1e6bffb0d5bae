"""Rollout-owned resources (`RolloutResources`): closed once at the rollout's end, whatever happened,
in reverse order, sync or async, errors collected; the python session of a graph is one of them."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from graphrl.runtime.services import RolloutResources
from graphrl.tools.registry import ToolBox


class Closes:
    def __init__(self, log, name, fail=False, is_async=False):
        self.log, self.name, self.fail = log, name, fail
        if is_async:
            self.close = self._aclose  # type: ignore[method-assign]

    def close(self):
        self.log.append(self.name)
        if self.fail:
            raise RuntimeError("close failed")

    async def _aclose(self):
        self.log.append(self.name)


def test_resources_close_once_in_reverse_order_and_collect_errors():
    log: list[str] = []
    res = RolloutResources()
    res.put("a", Closes(log, "a"))
    res.put("b", Closes(log, "b", fail=True))
    res.put("c", Closes(log, "c", is_async=True))
    res.put("d", object())  # nothing to close
    asyncio.run(res.close())
    asyncio.run(res.close())
    assert log == ["c", "b", "a"]
    assert res.close_errors == ["b: RuntimeError: close failed"]
    assert res.get("a") is None


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


GRAPH = """
name: session_graph
inputs:
  question: prompt
nodes:
  solve:
    llm: policy
    prompt:
      - user: "{{ question }}"
    next: setup
  setup:
    tool: python
    args: {code: "total = 40", session: true}
    next: use
  use:
    tool: python
    args: {code: "total += 2\\nimport os\\nprint(total, os.getcwd())", session: true}
    next: end
"""


class RecordingToolBoxForTests(ToolBox):
    """The real ToolBox, keeping each result for the test to read."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.results = []

    async def call(self, tool, args, **kw):
        res = await super().call(tool, args, **kw)
        self.results.append(res)
        return res


@pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux")
def test_a_graph_keeps_one_interpreter_across_its_tool_nodes_and_ends_it_with_the_rollout(kit):
    tools = RecordingToolBoxForTests([kit.dir])
    res = kit.rollout(GRAPH, {"policy": kit.engine(["ok"])}, {"prompt": "go"}, tools=tools)
    assert res.status == "completed", res.error
    assert [c.node for c in res.calls] == ["solve", "setup", "use"]
    total, workdir = tools.results[-1].text.split()
    assert total == "42" and tools.results[-1].data["session_calls"] == 2
    assert not Path(workdir).exists(), "the session's work directory outlived its rollout"
    assert not _session_pids(workdir), "the session's interpreter outlived its rollout"
