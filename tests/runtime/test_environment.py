"""Per-rollout environments (`environment:`): made and reset at the start, stepped by `env_step`,
handed to user tools and rewards with an `env` parameter, scored by `env_reward`, closed at the end
whatever happened, never shared between rollouts."""

from __future__ import annotations

import asyncio

import pytest

from graphrl.runtime.environment import as_step_result

ENV_MODULE = '''
import asyncio

LOG = []


class Counter:
    """A toy stateful environment: step(action) adds an integer; done at the target."""

    def __init__(self, target, fail_on=None):
        self.target = int(target)
        self.total = 0
        self.fail_on = fail_on
        self.steps = []
        LOG.append(("make", self.target))

    def reset(self):
        if self.fail_on == "reset":
            raise RuntimeError("reset broke")
        return {"task": f"reach {self.target}"}

    async def step(self, action):
        if self.fail_on == "step":
            raise ValueError("step broke")
        self.total += int(action)
        self.steps.append(int(action))
        done = self.total >= self.target
        return (f"total={self.total}", 1.0 if self.total == self.target else 0.0, done, {"n": len(self.steps)})

    def reward(self):
        return 1.0 if self.total == self.target else 0.0

    def close(self):
        LOG.append(("close", self.target, tuple(self.steps)))


def peek(env, label):
    return f"{label}: {env.total}/{env.target}"


def steps_taken(env, bonus=0.0):
    return len(env.steps) + bonus
'''

GRAPH = """
name: env_graph
inputs:
  target: metadata.target
environment:
  class: counter_env:Counter
  args: {target: "{{ target }}"}
nodes:
  act:
    llm: policy
    prompt:
      - user: "Task: {{ env.task }}. Say a number."
    parse: {regex: {n: '(\\d+)'}}
    max_visits: 4
    next: step
  step:
    tool: env_step
    args: {action: "{{ act.n }}"}
    next:
      - when: step.done
        goto: look
      - goto: act
  look:
    tool: counter_env:peek
    args: {label: seen}
    next: end
reward:
  terms:
    solved: {fn: env_reward}
    effort: {fn: "counter_env:steps_taken", args: {bonus: 0.5}, weight: 0.0}
"""


@pytest.fixture
def env_kit(kit):
    kit.write("counter_env.py", ENV_MODULE)
    import importlib
    import sys

    sys.modules.pop("counter_env", None)
    yield kit
    mod = sys.modules.pop("counter_env", None)
    if mod is not None:
        importlib.invalidate_caches()


def _log():
    import sys

    return sys.modules["counter_env"].LOG


def test_the_environment_is_made_stepped_scored_and_closed(env_kit):
    kit = env_kit
    res = kit.rollout(GRAPH, {"policy": kit.engine(["2", "3"])}, {"prompt": "", "metadata": {"target": 5}})
    assert res.status == "completed", (res.error, res.calls)
    assert [c.node for c in res.calls] == ["act", "step", "act", "step", "look"]
    assert res.reward == {"score": 1.0, "solved": 1.0, "effort": 2.5}
    assert _log() == [("make", 5), ("close", 5, (2, 3))]
    prompts = [kit.r.decode(s.prompt_ids) for s in res.samples]
    assert "Task: reach 5." in prompts[0]


def test_each_rollout_gets_its_own_environment(env_kit):
    kit = env_kit
    plan = kit.plan(GRAPH)
    ex = kit.executor(plan, {"policy": kit.engine(lambda prompt, i: "5")})

    async def two():
        return await asyncio.gather(*(ex.run(kit_input(kit, t, i)) for i, t in enumerate((5, 10))))

    a, b = asyncio.run(two())
    assert a.status == b.status == "completed"
    assert sorted(e for e in _log() if e[0] == "close") == [("close", 5, (5,)), ("close", 10, (5, 5))]


def kit_input(kit, target, i):
    from graphrl.runtime.executor import RolloutInput

    return RolloutInput(row={"prompt": "", "metadata": {"target": target}}, rollout_id=i)


def test_a_broken_reset_fails_the_rollout_located_and_still_closes(env_kit):
    kit = env_kit
    graph = GRAPH.replace('args: {target: "{{ target }}"}', 'args: {target: "{{ target }}", fail_on: reset}')
    res = kit.rollout(graph, {"policy": kit.engine([])}, {"prompt": "", "metadata": {"target": 5}})
    assert res.status == "failed" and "reset(): RuntimeError: reset broke" in res.error
    assert res.calls == () and res.reward is None
    assert _log() == [("make", 5), ("close", 5, ())]


def test_a_broken_step_is_an_observation_not_a_crash(env_kit):
    kit = env_kit
    graph = GRAPH.replace('args: {target: "{{ target }}"}', 'args: {target: "{{ target }}", fail_on: step}')
    res = kit.rollout(graph, {"policy": kit.engine(["1"] * 4)}, {"prompt": "", "metadata": {"target": 5}})
    steps = [c for c in res.calls if c.node == "step"]
    assert steps and all(c.error == "ValueError: step broke" for c in steps)
    assert ("close", 5, ()) in _log()


def test_the_environment_is_closed_when_the_rollout_is_cancelled(env_kit):
    kit = env_kit
    plan = kit.plan(GRAPH)
    ex = kit.executor(plan, {"policy": kit.engine(["1"] * 8, delay_s=0.5)})

    async def cancel_midway():
        task = asyncio.create_task(ex.run(kit_input(kit, 50, 0)))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_midway())
    assert _log() == [("make", 50), ("close", 50, ())]


@pytest.mark.parametrize(
    "value, text, data",
    [
        (("obs", 0.5, True, {"k": 1}), "obs", {"done": True, "reward": 0.5, "info": {"k": 1}}),
        ({"observation": "o", "done": True}, "o", {"done": True, "reward": None, "info": {}, "observation": "o"}),
        ("plain", "plain", {"done": False, "reward": None, "info": {}}),
        (None, "", {"done": False, "reward": None, "info": {}}),
    ],
)
def test_step_results_of_every_shape(value, text, data):
    res = as_step_result(value)
    assert res.ok and res.text == text and res.data == data
