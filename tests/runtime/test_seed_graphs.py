"""The bundled graphs (graphs/*.yaml) run with canned replies: their structure is pinned exactly.

Real parts: the Qwen tokenizer and chat template, the executor, parsers, the python sandbox, the
retrieval HTTP client (against a stub service), rewards. Canned: every model's replies.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path

import pytest
from aiohttp import web

from graphrl.compilers.lower import plan_from_path
from graphrl.runtime.ledger import check_fanout
from graphrl.tools.registry import ToolBox

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


@pytest.fixture(scope="module")
def plans():
    out = {}
    for name in ("agentflow", "memagent", "toolorchestra"):
        plan, diags = plan_from_path(GRAPHS / f"{name}.yaml")
        assert plan is not None, diags
        out[name] = plan
    return out


def assert_call_samples(res, policy_engine, node_of_request):
    """Every sample is one policy call: prompt == the ids sent, response == the ids returned, mask 1."""
    assert len(res.samples) == len(policy_engine.requests)
    for s, req, node in zip(res.samples, policy_engine.requests, node_of_request):
        s.check_invariants()
        assert s.prompt_ids == req.input_ids
        assert s.loss_mask == (1,) * s.response_length
        assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [(node, "generated", 1)]
    assert {s.rollout_id for s in res.samples} == {res.samples[0].rollout_id}
    assert [s.index for s in res.samples] == list(range(len(res.samples)))


# ================================================================ AgentFlow

STEP = (
    "<think>Maybe base_generator?\nTool Name: base_generator</think>\n**Context:** {ctx}\n"
    "**Sub-Goal:** {goal}\n**Tool Name:** {tool}"
)


class AgentFlowModels:
    """Canned planner / instruct / coder replies; the verifier says STOP on call `stop_at` (0: never)."""

    def __init__(
        self,
        kit,
        *,
        stop_at: int,
        final: str = "We computed 1023. \\boxed{1023}",
        verdict: str = "VERDICT: False",
        tools=("python_coder", "base_generator"),
    ):
        self.verifications = 0
        self.stop_at = stop_at
        steps = list(tools)

        def planner(p, i):
            if "Write a short analysis" in p:
                return "<think>hmm</think>The question asks for 2^10 - 1; python_coder can compute it."
            tool = steps[(i - 1) % len(steps)]
            return STEP.format(ctx=f"step {i}", goal=f"compute part {i}", tool=tool)

        def instruct(p, i):
            if "Turn the planned step" in p:
                goal = p.split("Sub-goal: ", 1)[1].split("\n", 1)[0]
                return f'```python\nexecution = tool.execute(query="Do: {goal}")\n```'
            if "decide whether it has done enough" in p:
                self.verifications += 1
                if self.verifications == self.stop_at:
                    return "All parts are covered.\n**Conclusion:** STOP"
                return "More is needed.\nConclusion: CONTINUE"
            if "Answer the question using" in p:
                return final
            if "equivalent to the reference answer" in p:
                return f"Thinking.\n{verdict}"
            return f"base answer to [{p.split('<|im_start|>user', 1)[1].split('<|im_end|>')[0].strip()}]"

        self.policy = kit.engine(planner)
        self.instruct = kit.engine(instruct)
        self.coder = kit.engine(lambda p, i: "```python\nprint('result', 2**10 - 1)\n```")

    def engines(self):
        return {"policy": self.policy, "instruct": self.instruct, "coder": self.coder}


ROW_AF = {"prompt": "What is 2^10 - 1?", "label": "1023", "metadata": {}}


def test_agentflow_stops_after_two_steps(kit, plans):
    models = AgentFlowModels(kit, stop_at=2)
    res = kit.run(kit.executor(plans["agentflow"], models.engines()), ROW_AF, rollout_id=11)
    assert res.status == "completed", res.error
    assert res.path == (
        ("plan", 1),
        ("next_step", 1),
        ("executor", 1),
        ("run_tool", 1),
        ("python_coder", 1),
        ("run_python", 1),
        ("record", 1),
        ("verifier", 1),
        ("next_step", 2),
        ("executor", 2),
        ("run_tool", 2),
        ("base_generator", 1),
        ("record", 2),
        ("verifier", 2),
        ("final_output", 1),
    )
    # exactly 3 planner samples: plan + 2 next_step; frozen calls are in none
    assert_call_samples(res, models.policy, ["plan", "next_step", "next_step"])
    assert res.reward == {"score": 1.0, "acc": 1.0, "pred": "1023", "gt": "1023"}
    assert [s.reward for s in res.samples] == pytest.approx([1 / 3] * 3)
    check_fanout(res.samples, 1.0, "even")
    assert all(s.rollout_id == 11 for s in res.samples)
    # the keyed memory: one record per step, command parsed from the executor (never executed)
    mem = res.state["memory"]
    assert list(mem) == ["Action Step 1", "Action Step 2"]
    assert mem["Action Step 1"]["tool"] == "python_coder"
    assert mem["Action Step 1"]["sub_goal"] == "compute part 1"
    assert mem["Action Step 1"]["command"] == "Do: compute part 1"
    assert mem["Action Step 1"]["result"] == "result 1023\n"  # the sandbox really ran the coder's code
    assert mem["Action Step 2"]["tool"] == "base_generator"
    assert mem["Action Step 2"]["result"] == "base answer to [Do: compute part 2]"
    # the second next_step prompt shows the first step's record
    second = kit.r.decode(models.policy.requests[2].input_ids)
    assert "Action Step 1 (python_coder)" in second and "Result: result 1023" in second
    # exact match: no judge call; the judge would be the 7th instruct call
    assert len(models.instruct.requests) == 2 + 2 + 1 + 1  # executor x2, verifier x2, base, final
    assert {c.endpoint for c in res.calls} == {"policy", "instruct", "coder", "tool:python"}


def test_agentflow_verifier_never_stops_runs_five_steps_then_final_output(kit, plans):
    models = AgentFlowModels(
        kit, stop_at=0, final="So \\boxed{1024 - 1}", verdict="VERDICT: True", tools=("base_generator",)
    )
    res = kit.run(kit.executor(plans["agentflow"], models.engines()), ROW_AF)
    assert res.status == "completed", res.error
    names = [n for n, _ in res.path]
    assert names.count("next_step") == 5 and names.count("verifier") == 5
    assert res.path[-2:] == (("verifier", 5), ("final_output", 1))
    assert_call_samples(res, models.policy, ["plan"] + ["next_step"] * 5)
    assert list(res.state["memory"]) == [f"Action Step {i}" for i in range(1, 6)]
    # not equal after normalisation -> the judge decided (VERDICT: True)
    assert res.reward["score"] == 1.0 and res.reward["pred"] == "1024 - 1"  # as written
    assert "equivalent to the reference answer" in kit.r.decode(models.instruct.requests[-1].input_ids)
    check_fanout(res.samples, 1.0, "even")
    assert [s.reward for s in res.samples] == pytest.approx([1 / 6] * 6)


def test_agentflow_unknown_tool_and_no_command_is_recorded_not_crashed(kit, plans):
    models = AgentFlowModels(kit, stop_at=1, final="\\boxed{7}", tools=("web_search",))
    models.instruct = kit.by_prompt(
        {
            "Turn the planned step": "I cannot write a command.",
            "decide whether it has done enough": "Conclusion: STOP",
            "Answer the question using": "\\boxed{7}",
            "equivalent to the reference answer": "VERDICT: maybe",
        }
    )
    res = kit.run(kit.executor(plans["agentflow"], models.engines()), ROW_AF)
    assert res.status == "completed"
    assert [n for n, _ in res.path] == [
        "plan",
        "next_step",
        "executor",
        "run_tool",
        "tool_error",
        "record",
        "verifier",
        "final_output",
    ]
    step = res.state["memory"]["Action Step 1"]
    assert step["command"] == "compute part 1"  # no parsable call: the sub-goal is the command
    assert step["result"] == "Error: the step could not be run with tool 'web_search'."
    assert res.reward["score"] == 0.0  # unparsable verdict -> False
    check_fanout(res.samples, 0.0, "even")


# ================================================================ MemAgent


def memagent_models(kit, empty_at=()):
    def policy(p, i):
        if "Updated memory:" in p:
            return "" if i in empty_at else f"note {i}: Dune was written by Frank Herbert."
        return "The author is \\boxed{Frank Herbert}."

    return kit.engine(policy)


def long_context(kit, n_chunks):
    sentence = "Filler sentence number {} says nothing at all about the question. "
    text, i = "", 0
    while len(kit.r.encode(text)) <= 5000 * (n_chunks - 1):
        text += "".join(sentence.format(i + j) for j in range(200))
        i += 200
    return text


@pytest.mark.parametrize("credit", ["even", "broadcast"])
def test_memagent_fans_out_one_sample_per_call(kit, plans, credit):
    context = long_context(kit, 3)
    n_chunks = math.ceil(len(kit.r.encode(context)) / 5000)
    assert n_chunks == 3
    plan = plans["memagent"]
    if credit == "broadcast":
        plan = plan.model_copy(update={"reward": plan.reward.model_copy(update={"credit": "broadcast"})})
    eng = memagent_models(kit, empty_at=(1,))
    row = {"prompt": "Who wrote Dune?", "label": ["F. Herbert", "Frank Herbert"], "metadata": {"context": context}}
    res = kit.run(kit.executor(plan, {"policy": eng}), row, rollout_id="ma-0")
    assert res.status == "completed", res.error
    assert res.path == (("check_context", 1), ("memorize", 1), ("memorize", 2), ("memorize", 3), ("answer", 1))
    assert_call_samples(res, eng, ["memorize"] * n_chunks + ["answer"])
    assert len(res.samples) == n_chunks + 1 and {s.rollout_id for s in res.samples} == {"ma-0"}
    assert res.reward == 1.0  # max over the gold answers
    check_fanout(res.samples, res.reward, credit)
    expected = [1 / (n_chunks + 1)] * (n_chunks + 1) if credit == "even" else [1.0] * (n_chunks + 1)
    assert [s.reward for s in res.samples] == pytest.approx(expected)
    prompts = [kit.r.decode(r.input_ids) for r in eng.requests]
    # memory flows chunk to chunk; the empty reply of call 1 kept the old memory
    assert "<memory>\nNo previous memory\n</memory>" in prompts[0]
    assert "<memory>\nnote 0: Dune" in prompts[1] and "<memory>\nnote 0: Dune" in prompts[2]
    assert "<memory>\nnote 2: Dune" in prompts[3]
    assert res.state["memory"].startswith("note 2:")
    # each memorize call sees its own chunk, in order, max_tokens as declared
    assert "Filler sentence number 0 says" in prompts[0] and "Filler sentence number 0 says" not in prompts[1]
    assert [r.sampling_params["max_new_tokens"] for r in eng.requests] == [1024] * n_chunks + [256]


def test_memagent_reward_reads_only_the_tail_of_the_answer(kit, plans):
    eng = kit.engine(["notes", "\\boxed{Frank Herbert} " + "and more words " * 30])
    row = {"prompt": "Who wrote Dune?", "label": "Frank Herbert", "metadata": {"context": "Dune by Frank Herbert."}}
    res = kit.run(kit.executor(plans["memagent"], {"policy": eng}), row)
    assert res.status == "completed" and res.reward == 0.0  # the \boxed{} is outside the last 300 chars


def test_memagent_without_context_is_aborted(kit, plans):
    eng = memagent_models(kit)
    res = kit.run(
        kit.executor(plans["memagent"], {"policy": eng}),
        {"prompt": "Who wrote Dune?", "label": ["Frank Herbert"], "metadata": {}},
    )
    assert res.status == "aborted" and res.reward is None
    assert res.samples == () and eng.requests == []
    assert res.path == (("check_context", 1),)


# ================================================================ ToolOrchestra


class RetrievalStubForTests:
    """A retrieval service (`POST /retrieve {queries, topk}`) on a free port, in its own thread."""

    def __init__(self):
        self.requests: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    async def _handle(self, request):
        body = await request.json()
        self.requests.append(body)
        q = body["queries"][0]
        docs = [
            {"title": f"T{k}", "contents": f"About {q}: Dune is a 1965 novel by Frank Herbert ({k})."}
            for k in range(body.get("topk", 3))
        ]
        return web.json_response({"result": [docs]})

    def _serve(self):
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/retrieve", self._handle)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._ready.set()
        self._loop.run_forever()

    def close(self):
        async def stop():
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class RedirectingToolBoxForTests(ToolBox):
    """The real ToolBox, with the graph's retrieval URL pointed at the stub."""

    def __init__(self, url):
        super().__init__()
        self.url = url
        self.calls: list[tuple[str, dict]] = []

    async def call(self, tool, args, *, timeout, max_chars, resources=None):
        self.calls.append((tool, dict(args)))
        if tool == "retrieve":
            args = {**args, "url": self.url}
        return await super().call(tool, args, timeout=timeout, max_chars=max_chars, resources=resources)


@pytest.fixture(scope="module")
def retrieval():
    stub = RetrievalStubForTests()
    yield stub
    stub.close()


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": n,
            "description": f"the {n} tool",
            "parameters": {"type": "object", "properties": {"model": {"type": "string"}}, "required": ["model"]},
        },
    }
    for n in ("search", "enhance_reasoning", "call_expert", "answer")
]
MAPPING = {"expert-1": "Qwen/Qwen3-32B", "expert-2": "Qwen/Qwen3-14B"}
ROW_TO = {
    "prompt": "Who wrote Dune?",
    "label": "Frank Herbert",
    "metadata": {"tools": TOOLS, "model_mapping": MAPPING, "pref_vec": {"accuracy": 1.0}},
}


def call(name, model):
    return f'<think>route</think>\n<tool_call>\n{{"name": "{name}", "arguments": {{"model": "{model}"}}}}\n</tool_call>'


def expert_reply(p, i):
    if "<query></query>" in p:
        return "<think>x</think><query>author of Dune</query>"
    if "Reason carefully" in p:
        return "<think>y</think>Check the year.\n```python\nprint(1900 + 65)\n```"
    if "between <answer> and" in p:
        return "<think>z</think><answer>Frank Herbert</answer>"
    return "<think>w</think>The author is Frank Herbert."


def toolorchestra(kit, plans, retrieval, policy_replies, row=ROW_TO):
    experts = {name: kit.engine(expert_reply) for name in MAPPING.values()}
    policy = kit.engine(policy_replies)
    tools = RedirectingToolBoxForTests(retrieval.url)
    ex = kit.executor(plans["toolorchestra"], {"policy": policy, **experts}, tools=tools)
    return kit.run(ex, row, rollout_id=5), policy, experts, tools


def test_toolorchestra_routes_tools_and_trains_only_orchestrator_turns(kit, plans, retrieval):
    turns = [
        call("search", "expert-1"),
        call("enhance_reasoning", "expert-2"),
        call("call_expert", "expert-1"),
        call("answer", "expert-2"),
    ]
    res, policy, experts, tools = toolorchestra(kit, plans, retrieval, turns)
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == [
        "orchestrate",
        "dispatch",
        "search_query",
        "search",
        "orchestrate",
        "dispatch",
        "reason",
        "run_code",
        "orchestrate",
        "dispatch",
        "consult",
        "orchestrate",
        "dispatch",
        "final_answer",
    ]
    # one sample per turn (sample: call), each the full reward (broadcast)
    assert_call_samples(res, policy, ["orchestrate"] * 4)
    assert res.reward == 1.0 and [s.reward for s in res.samples] == [1.0] * 4
    check_fanout(res.samples, 1.0, "broadcast")
    # the conversation is append-only: each turn's prompt extends the previous prompt + its reply
    for prev, nxt, reply in zip(policy.requests, policy.requests[1:], turns):
        assert nxt.input_ids[: len(prev.input_ids) + len(kit.ids(reply))] == prev.input_ids + kit.ids(reply)
    # tool results are in later prompts (mask 0 by construction: prompts are never trained) ...
    last_prompt = kit.r.decode(res.samples[-1].prompt_ids)
    assert "Doc 1: T0\nAbout author of Dune" in last_prompt
    assert "Output of the code:\n1965" in last_prompt and "The author is Frank Herbert." in last_prompt
    # ... and never in a trained response
    for s in res.samples:
        assert sum(s.loss_mask) == s.response_length
        text = kit.response_text(s)
        assert "Doc 1" not in text and "1965" not in text and text.startswith("<think>route</think>")
    # the tool schemas went through the chat template
    first = kit.r.decode(policy.requests[0].input_ids)
    assert "<tools>" in first and '"name": "enhance_reasoning"' in first
    assert retrieval.requests[-1] == {"queries": ["author of Dune"], "topk": 3}
    assert [t for t, _ in tools.calls] == ["retrieve", "python"]
    assert res.state["expert_calls"] == {"expert-1": 2, "expert-2": 2}
    assert res.state["prediction"] == "Frank Herbert"
    assert [c.endpoint for c in res.calls if c.node in ("search_query", "reason", "consult", "final_answer")] == [
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-14B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-14B",
    ]
    assert all(c.cost > 0 for c in res.calls if not c.endpoint.startswith("tool:"))
    # call_expert forwards the conversation without the orchestrator's system prompt
    consult = kit.r.decode(experts["Qwen/Qwen3-32B"].requests[1].input_ids)
    assert "You are an orchestrator" not in consult and "Who wrote Dune?" in consult
    assert "Doc 1: T0" in consult


@pytest.mark.parametrize(
    "reply",
    [
        "I will just answer: Frank Herbert",  # no tool call
        '<tool_call>{"name": "search", "arguments": {"model": }}</tool_call>',  # invalid JSON
        call("search", "expert-9"),  # unknown expert alias
        call("web_browse", "expert-1"),  # unknown tool
    ],
)
def test_toolorchestra_stops_on_an_invalid_tool_call(kit, plans, retrieval, reply):
    res, policy, experts, tools = toolorchestra(kit, plans, retrieval, [reply, call("answer", "expert-1")])
    assert res.status == "completed"
    assert [n for n, _ in res.path] == ["orchestrate", "dispatch"]
    assert len(policy.requests) == 1 and len(res.samples) == 1 and tools.calls == []
    assert all(not e.requests for e in experts.values())
    assert res.reward == 0.0 and res.samples[0].reward == 0.0


def test_toolorchestra_at_most_twelve_turns(kit, plans, retrieval):
    res, policy, experts, _ = toolorchestra(kit, plans, retrieval, lambda p, i: call("call_expert", "expert-1"))
    assert res.status == "completed"
    assert [n for n, _ in res.path].count("orchestrate") == 12
    assert len(policy.requests) == 12 and len(res.samples) == 12
    assert len(experts["Qwen/Qwen3-32B"].requests) == 12
    assert res.path[-1] == ("consult", 12)
    assert res.reward == 0.0 and res.state["expert_calls"] == {"expert-1": 12}
    check_fanout(res.samples, 0.0, "broadcast")
    # the samples grow turn by turn: every earlier turn's prompt is a prefix of the next
    for a, b in zip(res.samples, res.samples[1:]):
        assert b.prompt_ids[: len(a.tokens)] == a.tokens


def test_toolorchestra_trajectory_lines_are_json(kit, plans, retrieval):
    res, *_ = toolorchestra(kit, plans, retrieval, [call("answer", "expert-2")])
    assert res.status == "completed" and res.reward == 1.0
    for s in res.samples:
        json.dumps(s.to_json())


def test_toolorchestra_as_one_thread_sample_masks_every_tool_result(kit, retrieval):
    text = (GRAPHS / "toolorchestra.yaml").read_text()
    assert text.count("sample: call") == 1 and "templates: ../prompts/toolorchestra" in text
    text = text.replace("sample: call", "sample: thread").replace(
        "templates: ../prompts/toolorchestra", f"templates: {GRAPHS.parent / 'prompts' / 'toolorchestra'}"
    )
    plan = kit.plan(text, name="toolorchestra_thread.yaml")
    turns = [call("search", "expert-1"), call("enhance_reasoning", "expert-2"), call("answer", "expert-2")]
    res, policy, _, _ = toolorchestra(kit, {"toolorchestra": plan}, retrieval, turns)
    assert res.status == "completed" and res.reward == 1.0
    (s,) = res.samples
    s.check_invariants()
    assert s.prompt_ids == policy.requests[0].input_ids
    gens = [sp for sp in s.spans if sp.kind == "generated"]
    assert [(sp.node, sp.visit, sp.mask) for sp in gens] == [("orchestrate", v, 1) for v in (1, 2, 3)]
    for sp, req, reply in zip(gens, policy.requests, turns):
        assert s.tokens[: s.prompt_length + sp.start] == req.input_ids
        assert s.response_ids[sp.start : sp.end] == kit.ids(reply)
    obs = [sp for sp in s.spans if sp.kind == "observation"]
    assert [(sp.node, sp.mask) for sp in obs] == [("search", 0), ("run_code", 0)]
    assert "Doc 1: T0" in kit.r.decode(s.response_ids[obs[0].start : obs[0].end])
    assert sum(s.loss_mask) == sum(len(kit.ids(t)) for t in turns)
    assert s.reward == 1.0
