"""foreach with `parallel: N`: items run concurrently, results and samples come back in item order."""

from __future__ import annotations

import asyncio

from graphrl.compilers.lower import plan_from_path

SOLVERS = """\
name: solvers
inputs: {question: prompt, styles: metadata.styles}
state:
  answers: {default: [], merge: append}
nodes:
  solve:
    llm: policy
    prompt: [{user: "{{ item }}: {{ question }}"}]
    foreach: {over: styles, parallel: PAR}
    update: {answers: "{{ output.text }}"}
    next: pick
  pick:
    llm: policy
    sample: none
    prompt: [{user: "{{ answers | join(' | ') }}"}]
"""


class SlowFirstEngineForTests:
    """Echoes the style of each prompt; the first style's call finishes last (records concurrency)."""

    def __init__(self, kit):
        self.kit = kit
        self.in_flight = 0
        self.max_in_flight = 0
        self.prompts: list[str] = []

    async def generate(self, ids, params, *, session_id=None):
        text = self.kit.r.decode(ids)
        self.prompts.append(text)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.05 if "style0:" in text else 0.0)
        self.in_flight -= 1
        style = next((s for s in ("style0", "style1", "style2", "style3") if f"{s}:" in text), "pick")
        return await self.kit.engine([f"answer from {style}"]).generate(ids, params, session_id=session_id)

    async def close(self):
        pass


def _run(kit, par: int):
    plan = kit.plan(SOLVERS.replace("PAR", str(par)))
    engine = SlowFirstEngineForTests(kit)
    res = kit.run(
        kit.executor(plan, {"policy": engine}),
        {"prompt": "Q", "metadata": {"styles": ["style0", "style1", "style2", "style3"]}},
    )
    return res, engine


def test_parallel_items_run_concurrently_and_come_back_in_item_order(kit):
    res, engine = _run(kit, 4)
    assert res.status == "completed", res.error
    assert engine.max_in_flight == 4
    assert res.state["answers"] == [f"answer from style{i}" for i in range(4)]  # item order, not finish order
    assert [s.spans[0].visit for s in res.samples] == [1, 2, 3, 4]
    assert [kit.response_text(s) for s in res.samples] == [f"answer from style{i}<|im_end|>" for i in range(4)]
    assert [p for p in res.path] == [("solve", 1), ("solve", 2), ("solve", 3), ("solve", 4), ("pick", 1)]


def test_parallel_is_bounded_and_one_means_one_after_another(kit):
    res2, engine2 = _run(kit, 2)
    assert engine2.max_in_flight == 2 and res2.state["answers"] == [f"answer from style{i}" for i in range(4)]
    res1, engine1 = _run(kit, 1)
    assert engine1.max_in_flight == 1 and res1.state["answers"] == res2.state["answers"]


def test_a_thread_node_cannot_run_items_in_parallel(kit):
    path = kit.write(
        "t.yaml",
        """\
        name: par_thread
        inputs: {question: prompt, styles: metadata.styles}
        threads: {main: {prompt: "{{ question }}"}}
        nodes:
          solve:
            llm: policy
            thread: main
            prompt: [{user: "{{ item }}"}]
            foreach: {over: styles, parallel: 2}
        """,
    )
    plan, diags = plan_from_path(path)
    assert plan is None
    (d,) = [d for d in diags if "parallel" in d.message]
    assert d.code == "E003" and d.span.line == 9
