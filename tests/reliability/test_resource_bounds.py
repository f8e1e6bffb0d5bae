"""Resource bounds: a per-rollout wall-clock limit that holds against a hanging engine and a hanging
tool; observations cut to the tool's max_chars before they enter a thread; state histories bounded
by max_items / max_chars; a thread bounded by token_budget; in-flight requests per endpoint bounded
by models.X.max_concurrency -- counted on the servers, through `graphrl run`'s wiring and slime's.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from faultkit import (
    SOAK_GRAPH,
    SOAK_TOOL,
    FaultySGLangServerForTests,
    executor_over_http,
    rollout_input,
    scripted_faults,
    slime_standin,
    write_graph,
)

from graphrl.engines.scripted import Scripted, ScriptedEngineForTests
from graphrl.models.tokenizer import QWEN_TOKEN_IDS, qwen_tokenizer
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.runtime.runner import run_dataset
from graphrl.runtime.services import StaticEndpoints
from graphrl.tools.registry import ToolBox

IM_END = QWEN_TOKEN_IDS["<|im_end|>"]


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


@pytest.fixture(scope="module")
def renderer(tok):
    return ChatRenderer(tok)


def scripted_executor(plan, renderer, tok, reply_text: str):
    reply = tuple(renderer.encode(reply_text)) + (IM_END,)
    engine = ScriptedEngineForTests(lambda ids, params, i: Scripted(output_ids=reply), tokenizer=tok)
    search = [Path(plan.source["file"]).parent]
    return Executor(
        plan, StaticEndpoints({"policy": engine}, renderer), tools=ToolBox(search), rewards=RewardBox(search)
    ), engine


# ------------------------------------------------------------------------------ per-rollout timeout

TIMED = SOAK_GRAPH.replace("reward:", "limits: {timeout_s: 0.5}\nreward:")


def test_the_rollout_limit_holds_against_a_hanging_engine_and_aborts_the_request(tmp_path, tok):
    plan = write_graph(tmp_path, TIMED, "timed.yaml", {"soak_tool": SOAK_TOOL})
    with FaultySGLangServerForTests(tok, faults=scripted_faults(None, "hang")) as srv:
        ex = executor_over_http(plan, srv.url, tok, timeout_s=60)  # the client alone would wait 60 s

        async def main():
            try:
                return await ex.run(rollout_input(0))
            finally:
                await asyncio.sleep(0.2)
                await ex.endpoints.close()

        t0 = time.monotonic()
        res = asyncio.run(main())
        elapsed = time.monotonic() - t0
        served, aborts = srv.seen("r-0"), list(srv.aborts)
    assert elapsed < 1.5
    assert res.status == "failed" and res.error == "rollout timed out after 0.5 s" and res.reward is None
    (s,) = res.samples  # the first turn and the tool's observation are kept, well-formed
    s.check_invariants()
    assert s.status == "failed"
    assert [(sp.node, sp.kind) for sp in s.spans if sp.kind != "template"] == [
        ("act", "generated"),
        ("look", "observation"),
    ]
    assert [r.kind for r in served] == ["ok", "hang"] and served[1].rid in aborts  # the server is told


def test_the_rollout_limit_holds_against_a_hanging_tool(tmp_path, renderer, tok):
    plan = write_graph(
        tmp_path,
        """\
name: slowtool
limits: {timeout_s: 0.4}
nodes:
  a: {llm: policy, prompt: [user: go], next: t}
  t: {tool: "sleepy_tool:nap", timeout: 30}
""",
        "slowtool.yaml",
        {"sleepy_tool": "import asyncio\n\nasync def nap():\n    await asyncio.sleep(30)\n"},
    )
    ex, _ = scripted_executor(plan, renderer, tok, "ok")
    t0 = time.monotonic()
    res = asyncio.run(ex.run(RolloutInput(row={}, rollout_id=0)))
    assert time.monotonic() - t0 < 1.5
    assert res.status == "failed" and "timed out after 0.4 s" in res.error
    assert len(res.samples) == 1  # the llm call made before the tool is kept


def test_slime_generate_returns_a_failed_sample_at_the_rollout_limit(tmp_path, tok):
    from graphrl.compilers.slime.adapter import SlimeTarget
    from graphrl.compilers.slime.emit import write_slime_target

    plan = write_graph(tmp_path / "g", TIMED, "timed.yaml", {"soak_tool": SOAK_TOOL})
    write_slime_target(plan, tmp_path / "out")
    sm = slime_standin()
    with FaultySGLangServerForTests(tok, faults=scripted_faults(None, "hang")) as srv:
        host, port = srv.url.removeprefix("http://").split(":")
        args = sm.ArgsStandIn(sglang_router_ip=host, sglang_router_port=int(port), graphrl_request_timeout_s=60)
        target = SlimeTarget(tmp_path / "out" / "plan.json", tokenizer_loader=lambda p: tok)
        sample = sm.SampleStandIn(index=0, group_index=0, prompt="q", label="42", session_id="s0")

        async def main():
            try:
                return await target.generate(args, sample, {"temperature": 1.0})
            finally:
                await target.close()

        t0 = time.monotonic()
        asyncio.run(main())
        assert time.monotonic() - t0 < 1.5
    assert sample.status.value == "failed" and sample.remove_sample and sample.reward == 0.0
    assert sample.metadata["graphrl"]["error"] == "rollout timed out after 0.5 s"
    assert len(sample.loss_mask) == sample.response_length == len(sample.rollout_log_probs)


# ------------------------------------------------------------------------------ memory per rollout


def test_a_huge_tool_output_enters_the_thread_cut_to_max_chars(tmp_path, renderer, tok):
    plan = write_graph(
        tmp_path,
        """\
name: bigobs
threads:
  main: {prompt: [user: go]}
nodes:
  a: {llm: policy, thread: main, max_visits: 2, next: t}
  t:
    tool: "big_tool:flood"
    max_chars: 300
    append_to: main
    update: {seen: "{{ output.text }}"}
    next: a
state:
  seen: ""
""",
        "bigobs.yaml",
        {"big_tool": "def flood():\n    return 'A' * 5_000_000 + 'Z' * 5_000_000\n"},
    )
    ex, engine = scripted_executor(plan, renderer, tok, "look")
    res = asyncio.run(ex.run(RolloutInput(row={}, rollout_id=0)))
    assert res.status == "completed", res.error
    marker = "\n...[9999700 characters cut]...\n"
    assert res.state["seen"] == "A" * 150 + marker + "Z" * 150
    (s,) = res.samples
    obs = [sp for sp in s.spans if sp.kind == "observation"]
    assert obs and all(sp.end - sp.start < 400 for sp in obs)  # tokens, of a 300-character observation
    assert max(len(r.input_ids) for r in engine.requests) < 600


def test_state_histories_stay_within_max_items_and_max_chars(tmp_path, renderer, tok):
    plan = write_graph(
        tmp_path,
        """\
name: hist
state:
  notes: {default: [], merge: append, max_items: 3, max_chars: 50}
  by_step: {default: {}, merge: keyed, max_items: 2, max_chars: 50}
  last: {default: "", max_chars: 20, cut: end}
nodes:
  step:
    llm: policy
    prompt: [user: "step {{ visit }}"]
    max_visits: 40
    update:
      notes: "{{ output.text }}"
      by_step: {"s{{ visit }}": "{{ output.text }}"}
      last: "{{ output.text }}"
    next: step
""",
        "hist.yaml",
    )
    ex, _ = scripted_executor(plan, renderer, tok, "word " * 400)
    res = asyncio.run(ex.run(RolloutInput(row={}, rollout_id=0)))
    assert res.status == "completed" and len(res.path) == 40
    notes, by_step, last = res.state["notes"], res.state["by_step"], res.state["last"]
    assert len(notes) == 3 and list(by_step) == ["s39", "s40"]
    bound = 50 + len("\n...[99999 characters cut]...\n")
    assert all(len(x) <= bound for x in notes + list(by_step.values()))
    assert last.startswith("word word word word ") and len(last) <= 20 + bound - 50


def test_a_thread_is_bounded_by_the_token_budget(tmp_path, renderer, tok):
    budget, max_tokens = 600, 40
    plan = write_graph(
        tmp_path,
        f"""\
name: budget
threads:
  main: {{prompt: [user: go]}}
nodes:
  act:
    llm: policy
    thread: main
    max_tokens: {max_tokens}
    max_visits: 1000
    token_budget: {budget}
    next: obs
  obs:
    tool: "obs_tool_budget:note"
    max_chars: 100
    append_to: main
    next: act
""",
        "budget.yaml",
        {"obs_tool_budget": "def note():\n    return 'noted ' * 50\n"},
    )
    ex, engine = scripted_executor(plan, renderer, tok, "thinking " * 30)
    res = asyncio.run(ex.run(RolloutInput(row={}, rollout_id=0)))
    assert res.status == "completed"
    (s,) = res.samples
    obs_tokens = max(sp.end - sp.start for sp in s.spans if sp.kind != "generated")
    # the node is not entered once the policy used `budget` tokens; so the thread holds at most
    # budget + one reply + one observation (with its template tokens)
    assert len(s.tokens) < budget + max_tokens + obs_tokens
    assert len(engine.requests) < 10


# ------------------------------------------------------------------------------ concurrency


CONC = """\
name: conc
models:
  policy: {max_concurrency: 3}
  helper: {url: "http://127.0.0.1:9", max_concurrency: 2}
inputs: {q: prompt}
nodes:
  a: {llm: policy, prompt: [user: "{{ q }}"], max_tokens: 8, next: b}
  b: {llm: helper, prompt: [user: "{{ a.text }}"], max_tokens: 8}
"""


def test_max_concurrency_bounds_in_flight_requests_per_endpoint_in_graphrl_run(tmp_path, tok):
    from graphrl.app.endpoints import build_endpoints

    plan = write_graph(tmp_path, CONC, "conc.yaml")
    with (
        FaultySGLangServerForTests(tok, reply=lambda p: "x", delay_s=0.05) as pol,
        FaultySGLangServerForTests(tok, reply=lambda p: "y", delay_s=0.05) as helper,
    ):
        eps = build_endpoints(plan, engine="sglang", url=pol.url, tokenizer="qwen", endpoints={"helper": helper.url})
        ex = Executor(plan, eps, tools=ToolBox([]), rewards=RewardBox([]))
        rows = [{"prompt": f"q{i}"} for i in range(24)]

        async def main():
            try:
                return await run_dataset(ex, rows, tmp_path / "t.jsonl", concurrency=24, progress=False)
            finally:
                await eps.close()

        summary = asyncio.run(main())
        assert summary.statuses == {"completed": 24}
        assert (pol.max_in_flight, sum(pol.counts.values())) == (3, 24)
        assert (helper.max_in_flight, sum(helper.counts.values())) == (2, 24)


def test_max_concurrency_bounds_in_flight_requests_per_endpoint_in_slime_generate(tmp_path, tok):
    from graphrl.compilers.slime.adapter import SlimeTarget
    from graphrl.compilers.slime.emit import write_slime_target

    plan = write_graph(tmp_path / "g", CONC, "conc.yaml")
    write_slime_target(plan, tmp_path / "out")
    sm = slime_standin()
    with (
        FaultySGLangServerForTests(tok, reply=lambda p: "x", delay_s=0.05) as pol,
        FaultySGLangServerForTests(tok, reply=lambda p: "y", delay_s=0.05) as helper,
    ):
        host, port = pol.url.removeprefix("http://").split(":")
        hhost, hport = helper.url.removeprefix("http://").split(":")
        args = sm.ArgsStandIn(
            sglang_router_ip=host, sglang_router_port=int(port), sglang_model_routers={"helper": (hhost, int(hport))}
        )
        target = SlimeTarget(tmp_path / "out" / "plan.json", tokenizer_loader=lambda p: tok)
        samples = [sm.SampleStandIn(index=i, group_index=i // 4, prompt=f"q{i}", session_id=f"s{i}") for i in range(16)]

        async def main():  # slime's rollout manager: every sample's generate on one event loop
            try:
                return await asyncio.gather(*(target.generate(args, s, {"temperature": 1.0}) for s in samples))
            finally:
                await target.close()

        asyncio.run(main())
        assert all(s.status.value == "completed" for s in samples)
        assert (pol.max_in_flight, helper.max_in_flight) == (3, 2)
