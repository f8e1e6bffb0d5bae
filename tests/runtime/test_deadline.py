"""runtime.deadline: a rollout's time limit holds even when it expires during a synchronous step and
the next await is a tool call that finishes at once -- the case in which Python 3.11's wait_for
returns the tool's result and drops the cancellation, so the rollout ran on into a hung engine call
(found when a first decode built its table inside a rollout's 0.5 s)."""

from __future__ import annotations

import asyncio
import time

import pytest

from graphrl.engines.base import Generation
from graphrl.runtime import deadline
from graphrl.runtime.executor import RolloutInput

GRAPH = """
name: t
limits: {timeout_s: 0.5}
threads:
  main:
    prompt: [user: go]
nodes:
  act:
    llm: policy
    thread: main
    max_visits: 2
    parse: {tool_calls: calls, default: {calls: []}}
    next:
      - {when: "act.calls", goto: look}
      - goto: end
  look:
    tool: quick_tool:lookup
    args: {query: q}
    append_to: main
    next: act
"""

CALL = '<tool_call>\n{"name": "lookup", "arguments": {"query": "q"}}\n</tool_call>'


class _BlockThenHangEngineForTests:
    """Call 1 blocks the event loop past the deadline, then answers with a tool call; call 2 hangs."""

    def __init__(self, reply):
        self.reply, self.calls = reply, 0

    async def generate(self, input_ids, sampling_params, *, session_id=None):
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.7)  # noqa: ASYNC251 - the point: a synchronous step longer than the time left (0.5 s)
            r = self.reply
            return Generation(r.output_ids, r.logprobs, r.finish_reason)
        await asyncio.sleep(30)  # a hung engine: only the deadline ends this
        raise AssertionError("the deadline did not end the rollout")


def test_the_deadline_holds_when_it_expires_as_a_tool_call_returns(kit):
    kit.write("quick_tool.py", "async def lookup(query):\n    return 'found ' + query\n")
    plan = kit.plan(GRAPH)
    eng = _BlockThenHangEngineForTests(kit.reply(CALL))
    ex = kit.executor(plan, {"policy": eng})
    t0 = time.monotonic()
    res = asyncio.run(ex.run(RolloutInput(row={}, rollout_id=0)))
    elapsed = time.monotonic() - t0
    assert res.status == "failed" and res.error == "rollout timed out after 0.5 s"
    assert elapsed < 10, f"the rollout ran on for {elapsed:.1f} s after its deadline"
    (s,) = res.samples  # the first turn and the tool's observation are kept
    s.check_invariants()


def test_within_gives_the_result_a_timeout_or_the_outside_cancellation():
    async def value(x, delay=0.0):
        await asyncio.sleep(delay)
        return x

    async def main():
        assert await deadline.within(value(1), 1.0) == 1
        assert await deadline.within(value(2), None) == 2
        with pytest.raises(asyncio.TimeoutError):
            await deadline.within(value(3, 1.0), 0.05)
        task = asyncio.ensure_future(deadline.within(value(4, 1.0), 5.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
