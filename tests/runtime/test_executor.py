"""Executor semantics with a scripted engine, the real Qwen tokenizer and small graphs written here.

Each test pins one behaviour of `Executor.run`: what goes into training samples (token-exact), how
control flows, how limits and faults end a rollout, how rewards reach the samples.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from graphrl.engines.base import EngineError, FinishReason, Generation
from graphrl.engines.scripted import Scripted
from graphrl.models.tokenizer import QWEN_TOKEN_IDS
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.executor import RolloutInput
from graphrl.runtime.ledger import FanoutError, check_fanout
from graphrl.tools.registry import ToolBox

IM_END = QWEN_TOKEN_IDS["<|im_end|>"]


def gen_spans(sample):
    return [sp for sp in sample.spans if sp.kind == "generated"]


# ---------------------------------------------------------------- samples: token-exact


def test_fresh_prompt_policy_node_gives_one_exact_sample(kit):
    plan = kit.plan("""
        name: t
        inputs: {q: prompt}
        nodes:
          solve:
            llm: policy
            prompt: [{system: Be brief.}, {user: "Q: {{ q }}"}]
            max_tokens: 64
        """)
    out = kit.ids("The answer is \\boxed{4}.")
    lps = tuple(-0.01 * (i + 1) for i in range(len(out)))
    eng = kit.engine([Scripted(output_ids=out, logprobs=lps)])
    res = kit.run(kit.executor(plan, {"policy": eng}), {"prompt": "2+2?"}, rollout_id="r-1")
    assert res.status == "completed" and res.error is None
    (s,) = res.samples
    expected_prompt = kit.r.start([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q: 2+2?"}])
    assert s.prompt_ids == expected_prompt == eng.requests[0].input_ids
    assert s.response_ids == out
    assert s.loss_mask == (1,) * len(out)
    assert s.rollout_log_probs == lps
    assert s.response_length == len(out) and s.rollout_id == "r-1" and s.index == 0
    assert [(sp.node, sp.visit, sp.mask, sp.kind) for sp in s.spans] == [("solve", 1, 1, "generated")]
    assert eng.requests[0].sampling_params["max_new_tokens"] == 64
    assert IM_END in eng.requests[0].sampling_params["stop_token_ids"]
    assert res.reward is None  # no reward declared
    s.check_invariants()


def test_untrained_policy_call_is_in_a_sample_with_mask_zero_and_zero_logprobs(kit):
    plan = kit.plan("""
        name: t
        nodes:
          warmup:
            llm: policy
            train: false
            prompt: [user: hi]
            next: solve
          solve:
            llm: policy
            prompt: [user: again]
        """)
    res = kit.run(kit.executor(plan, {"policy": kit.engine(["a b c", "d"])}), {})
    first, second = res.samples
    assert first.loss_mask == (0,) * first.response_length and set(first.rollout_log_probs) == {0.0}
    assert second.loss_mask == (1,) * second.response_length and set(second.rollout_log_probs) == {-0.25}


def test_frozen_node_makes_no_sample_but_a_call_record(kit):
    plan = kit.plan("""
        name: t
        models:
          helper: {url: "http://127.0.0.1:1", price: {input: 1.0, output: 2.0}}
        nodes:
          ask:
            llm: helper
            prompt: [user: hello]
            next: solve
          solve:
            llm: policy
            prompt: [user: "helper said {{ ask.text }}"]
        """)
    helper, policy = kit.engine(["frozen words"]), kit.engine(["mine"])
    res = kit.run(kit.executor(plan, {"policy": policy, "helper": helper}), {})
    assert res.status == "completed"
    assert len(res.samples) == 1
    assert {sp.node for sp in res.samples[0].spans} == {"solve"}
    ask_call = res.calls[0]
    n_in, n_out = len(helper.requests[0].input_ids), len(kit.ids("frozen words"))
    assert (ask_call.node, ask_call.endpoint, ask_call.prompt_tokens, ask_call.completion_tokens) == (
        "ask",
        "helper",
        n_in,
        n_out,
    )
    assert math.isclose(ask_call.cost, (n_in * 1.0 + n_out * 2.0) / 1e6)
    assert "helper said frozen words" in kit.r.decode(policy.requests[0].input_ids)


def test_thread_with_tool_observations_is_one_sample_with_masked_observations(kit):
    kit.write("obs_tool_thread.py", "def observe(text):\n    return f'saw {len(text)} chars'\n")
    plan = kit.plan("""
        name: t
        inputs: {q: prompt}
        threads:
          main:
            prompt: [{system: Use the tool.}, {user: "{{ q }}"}]
        nodes:
          turn:
            llm: policy
            thread: main
            max_visits: 3
            next: observe
          observe:
            tool: obs_tool_thread:observe
            args: {text: "{{ turn.text }}"}
            append_to: main
            next: turn
        """)
    replies = ["one", "two two", "three three three"]
    eng = kit.engine(replies)
    res = kit.run(kit.executor(plan, {"policy": eng}), {"prompt": "go"})
    assert res.status == "completed", res.error
    assert [p for p in res.path] == [
        ("turn", 1),
        ("observe", 1),
        ("turn", 2),
        ("observe", 2),
        ("turn", 3),
        ("observe", 3),
    ]
    (s,) = res.samples
    s.check_invariants()
    assert s.prompt_ids == eng.requests[0].input_ids
    gens = gen_spans(s)
    assert [(sp.node, sp.visit, sp.mask) for sp in gens] == [("turn", 1, 1), ("turn", 2, 1), ("turn", 3, 1)]
    for sp, req, text in zip(gens, eng.requests, replies):
        # what was sent before this turn is exactly the sample's tokens before its span
        assert s.tokens[: s.prompt_length + sp.start] == req.input_ids
        assert s.response_ids[sp.start : sp.end] == kit.ids(text)
        assert set(s.rollout_log_probs[sp.start : sp.end]) == {-0.25}
    others = [sp for sp in s.spans if sp.kind != "generated"]
    assert others and all(sp.mask == 0 for sp in others)
    assert all(set(s.rollout_log_probs[sp.start : sp.end]) == {0.0} for sp in others)
    obs = [sp for sp in others if sp.kind == "observation"]
    assert [(sp.node, sp.visit) for sp in obs] == [("observe", 1), ("observe", 2)]
    assert [kit.r.decode(s.response_ids[sp.start : sp.end]) for sp in obs] == ["saw 3 chars", "saw 7 chars"]
    assert sum(s.loss_mask) == sum(len(kit.ids(t)) for t in replies)
    # the last observation was appended after the last turn: it is in no sample
    assert "saw 17 chars" not in kit.response_text(s)


# ---------------------------------------------------------------- control flow


ROUTING = """
    name: t
    nodes:
      a:
        llm: policy
        prompt: [user: pick]
        next: route
      route:
        switch: a.text | trim
        cases: {x: bx, "y": by}
        default: bd
      bx: {update: {}}
      by: {update: {}}
      bd: {update: {}}
    """


@pytest.mark.parametrize("reply,target", [("x", "bx"), (" y ", "by"), ("z", "bd")])
def test_switch_routes_on_the_value_with_a_default(kit, reply, target):
    res = kit.rollout(ROUTING, {"policy": kit.engine([reply])}, {})
    assert res.status == "completed"
    assert [n for n, _ in res.path] == ["a", "route", target]


@pytest.mark.parametrize("reply,target", [("yes", "t"), ("no", "f")])
def test_switch_on_a_boolean_matches_true_false_keys(kit, reply, target):
    res = kit.rollout(
        """
        name: t
        nodes:
          a: {llm: policy, prompt: [user: pick], next: route}
          route:
            switch: "'yes' in a.text"
            cases: {true: t, false: f}
            default: end
          t: {update: {}}
          f: {update: {}}
        """,
        {"policy": kit.engine([reply])},
        {},
    )
    assert [n for n, _ in res.path] == ["a", "route", target]


@pytest.mark.parametrize("reply,target", [("go left", "left"), ("go right", "right"), ("stay", "other")])
def test_next_takes_the_first_true_when_else_the_default(kit, reply, target):
    res = kit.rollout(
        """
        name: t
        nodes:
          a:
            llm: policy
            prompt: [user: pick]
            next:
              - {when: "'left' in a.text", goto: left}
              - {when: "'right' in output.text", goto: right}
              - goto: other
          left: {update: {}}
          right: {update: {}}
          other: {update: {}}
        """,
        {"policy": kit.engine([reply])},
        {},
    )
    assert [n for n, _ in res.path] == ["a", target]


LOOP = """
    name: t
    state:
      seen: {default: [], merge: append}
    nodes:
      step:
        llm: policy
        prompt: [user: "step {{ visit }}"]
        max_visits: 3
        {on_limit}
        update: {seen: "{{ visit }}"}
        next: step
      wrap: {update: {}}
    """


def test_max_visits_then_on_limit(kit):
    res = kit.rollout(LOOP.replace("{on_limit}", "on_limit: wrap"), {"policy": kit.engine(["a", "b", "c"])}, {})
    assert res.status == "completed"
    assert res.path == (("step", 1), ("step", 2), ("step", 3), ("wrap", 1))
    assert res.state["seen"] == [1, 2, 3] and len(res.samples) == 3


def test_max_visits_without_on_limit_ends(kit):
    eng = kit.engine(["a", "b", "c"])
    res = kit.rollout(LOOP.replace("{on_limit}", "").replace("      wrap: {update: {}}\n", ""), {"policy": eng}, {})
    assert res.status == "completed" and [n for n, _ in res.path] == ["step"] * 3 and len(eng.requests) == 3


def test_a_ring_of_on_limit_edges_truncates_the_rollout_instead_of_spinning(kit):
    """The checker refuses such a ring (E104); a plan that has one anyway (changed after the check)
    ends its rollout as truncated, where the walk used to pass from one limited node to the next
    forever without counting a step."""
    plan = kit.plan(
        LOOP.replace("{on_limit}", "on_limit: wrap").replace(
            "wrap: {update: {}}", "wrap: {update: {}, max_visits: 1, next: step}"
        )
    )
    nodes = dict(plan.nodes)
    nodes["wrap"] = nodes["wrap"].model_copy(update={"on_limit": "step"})
    ring = plan.model_copy(update={"nodes": nodes})
    res = kit.run(kit.executor(ring, {"policy": kit.engine(["a", "b", "c"])}), {})
    assert res.status == "truncated" and "on_limit edges loop" in res.error, res.error
    assert [n for n, _ in res.path] == ["step", "step", "step", "wrap"]


def test_token_budget_stops_entering_the_node(kit):
    prompt_len = len(kit.r.start([{"role": "user", "content": "spend"}]))
    per_call = prompt_len + len(kit.ids("some tokens here"))
    budget = 2 * per_call + 1  # after two calls the budget is not yet reached; after three it is
    res = kit.rollout(
        f"""
        name: t
        nodes:
          spend:
            llm: policy
            prompt: [user: spend]
            max_visits: 10
            token_budget: {budget}
            on_limit: done
            next: spend
          done: {{update: {{}}}}
        """,
        {"policy": kit.engine(lambda p, i: "some tokens here")},
        {},
    )
    assert [n for n, _ in res.path] == ["spend"] * 3 + ["done"]
    assert sum(c.prompt_tokens + c.completion_tokens for c in res.calls) == 3 * per_call


def test_max_steps_truncates_and_still_rewards(kit):
    kit.write("rw_steps.py", "def score(n):\n    return float(n)\n")
    eng = kit.engine(lambda p, i: f"r{i}")
    res = kit.rollout(
        """
        name: t
        limits: {max_steps: 3}
        nodes:
          again:
            llm: policy
            prompt: [user: again]
            next:
              - {when: "'stop' in again.text", goto: end}
              - goto: again
        reward:
          fn: rw_steps:score
          args: {n: "{{ visits.again }}"}
        """,
        {"policy": eng},
        {},
    )
    assert res.status == "truncated" and "max_steps" in res.error
    assert len(eng.requests) == 3 and len(res.samples) == 3
    assert res.reward == 3.0 and sum(s.reward for s in res.samples) == pytest.approx(3.0)


def test_abort_target_aborts_without_reward(kit):
    graph = """
        name: t
        inputs:
          context: {from: metadata.context, required: false, default: ""}
        nodes:
          read:
            llm: policy
            prompt: [user: "read {{ context }}"]
            next:
              - {when: "'bad' in read.text", goto: abort}
              - goto: end
        reward: {fn: exact_match, args: {prediction: "{{ read.text }}", label: x}}
        """
    res = kit.rollout(graph, {"policy": kit.engine(["bad"])}, {"metadata": {"context": "c"}})
    assert res.status == "aborted" and res.reward is None and "abort" in res.error
    assert res.aborted_by == "graph"  # a decision about the row (a target may treat it as final)
    assert [s.status for s in res.samples] == ["aborted"] and res.samples[0].reward is None
    ok = kit.rollout(graph, {"policy": kit.engine(["x"])}, {"metadata": {"context": "c"}})
    assert ok.status == "completed" and ok.reward == 1.0


def test_finish_length_on_the_last_policy_call_truncates(kit):
    graph = """
        name: t
        models:
          helper: {url: "http://127.0.0.1:1"}
        nodes:
          a: {llm: policy, prompt: [user: one], max_tokens: 3, next: b}
          b: {llm: policy, prompt: [user: two], max_tokens: 3, next: c}
          c: {llm: helper, prompt: [user: three], max_tokens: 2}
        """
    long, short = "one two three four five six", "ok"
    # the last policy call is cut at max_tokens (the frozen call after it does not count)
    res = kit.rollout(graph, {"policy": kit.engine([short, long]), "helper": kit.engine([short])}, {})
    assert res.status == "truncated"
    assert [c.finish_reason for c in res.calls] == ["stop", "length", "stop"]
    assert [s.status for s in res.samples] == ["completed", "truncated"]
    assert res.samples[1].response_length == 3
    # a cut earlier call, a clean last policy call, a cut frozen call: completed
    res = kit.rollout(graph, {"policy": kit.engine([long, short]), "helper": kit.engine([long])}, {})
    assert res.status == "completed"
    assert [c.finish_reason for c in res.calls] == ["length", "stop", "length"]


TOOLCHAIN = """
    name: t
    nodes:
      a: {llm: policy, prompt: [user: one], next: t}
      t: {tool: "{tool}", args: {}, next: b}
      b: {llm: policy, prompt: [user: two], next: c}
      c: {llm: policy, prompt: [user: three]}
    reward: {fn: exact_match, args: {prediction: "{{ c.text }}", label: x}}
    """


def _counting_tool(kit, name):
    kit.write(f"{name}.py", "CALLS = []\ndef tick():\n    CALLS.append(1)\n    return 'ticked'\n")
    return f"{name}:tick"


def test_engine_abort_ends_the_rollout_and_nothing_runs_after_it(kit):
    import importlib

    ref = _counting_tool(kit, "count_tool_abort")
    eng = kit.engine([kit.reply("partial", finish="abort"), "never", "never"])
    res = kit.rollout(TOOLCHAIN.replace("{tool}", ref), {"policy": eng}, {})
    assert res.status == "aborted" and res.reward is None and "engine aborted" in res.error
    assert res.aborted_by == "engine"
    assert len(eng.requests) == 1
    assert res.path == (("a", 1),)
    assert [c.node for c in res.calls] == ["a"]
    tool_module = importlib.import_module("count_tool_abort")
    assert tool_module.CALLS == []
    assert [s.status for s in res.samples] == ["aborted"]


def test_engine_abort_mid_rollout_keeps_earlier_samples_and_stops(kit):
    ref = _counting_tool(kit, "count_tool_abort2")
    eng = kit.engine(["fine", kit.reply("cut", finish="abort"), "never"])
    res = kit.rollout(TOOLCHAIN.replace("{tool}", ref), {"policy": eng}, {})
    assert res.status == "aborted" and len(eng.requests) == 2
    assert [c.node for c in res.calls] == ["a", "t", "b"]
    assert [s.status for s in res.samples] == ["aborted", "aborted"] and all(s.reward is None for s in res.samples)


def test_caller_abort_event_stops_before_the_next_call(kit):
    plan = kit.plan(TOOLCHAIN.replace("{tool}", _counting_tool(kit, "count_tool_abort3")))
    eng = kit.engine(["one", "two", "three"], delay_s=0.2)
    ex = kit.executor(plan, {"policy": eng})

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(ex.run(RolloutInput(row={}, rollout_id=0), abort=stop))
        await asyncio.sleep(0.05)
        stop.set()
        return await task

    res = asyncio.run(main())
    assert res.status == "aborted" and len(eng.requests) == 1 and res.reward is None
    assert res.aborted_by == "caller"
    assert [n for n, _ in res.path] == ["a"]


def test_engine_error_fails_the_rollout_and_keeps_built_samples(kit):
    ref = _counting_tool(kit, "count_tool_err")
    eng = kit.engine(["fine"])  # the second call runs out of script: EngineError
    res = kit.rollout(TOOLCHAIN.replace("{tool}", ref), {"policy": eng}, {})
    assert res.status == "failed" and res.error.startswith("EngineError") and res.reward is None
    assert len(res.samples) == 1 and res.samples[0].status == "failed"
    assert res.samples[0].response_ids == kit.ids("fine")


def test_on_error_routes_instead_of_failing(kit):
    class Flaky:
        def __init__(self):
            self.n = 0

        async def generate(self, ids, params, *, session_id=None):
            self.n += 1
            if self.n == 2:
                raise EngineError("connection refused", retryable=True)
            out = kit.ids("fine")
            return Generation(out, (-0.5,) * len(out), FinishReason("stop", IM_END), prompt_tokens=len(ids))

        async def close(self):
            pass

    res = kit.rollout(
        """
        name: t
        state:
          note: ""
        nodes:
          a: {llm: policy, prompt: [user: one], next: b}
          b:
            llm: policy
            prompt: [user: two]
            on_error: recover
            next: end
          recover:
            update: {note: "{{ 'b failed: ' ~ b.error if not b.ok else 'b ok' }}"}
            next: c
          c: {llm: policy, prompt: [user: three]}
        """,
        {"policy": Flaky()},
        {},
    )
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["a", "b", "recover", "c"]
    assert res.state["note"] == "b failed: EngineError: connection refused"
    assert len(res.samples) == 2 and {sp.node for s in res.samples for sp in s.spans} == {"a", "c"}


def test_rollout_timeout_fails_and_keeps_earlier_samples(kit):
    plan = kit.plan("""
        name: t
        limits: {timeout_s: 0.6}
        nodes:
          a: {llm: policy, prompt: [user: one], next: b}
          b: {llm: policy, prompt: [user: two], next: c}
          c: {llm: policy, prompt: [user: three]}
        reward: {fn: exact_match, args: {prediction: "{{ c.text }}", label: three}}
        """)
    eng = kit.engine(["one", "two", "three"], delay_s=0.4)  # a done at 0.4 s; b would be at 0.8 s
    ex = kit.executor(plan, {"policy": eng})
    t0 = time.monotonic()
    res = kit.run(ex, {})
    assert time.monotonic() - t0 < 0.75
    assert res.status == "failed" and "timed out after 0.6 s" in res.error and res.reward is None
    assert len(eng.requests) == 2
    assert len(res.samples) == 1 and res.samples[0].status == "failed"
    assert res.samples[0].response_ids == kit.ids("one")


def test_missing_required_input_fails_naming_the_input(kit):
    eng = kit.engine(["never"])
    res = kit.rollout(
        """
        name: t
        inputs:
          question: prompt
          document: metadata.context
        nodes:
          a: {llm: policy, prompt: [user: "{{ question }} {{ document }}"]}
        """,
        {"policy": eng},
        {"prompt": "q", "metadata": {}},
    )
    assert res.status == "failed"
    assert "input 'document'" in res.error and "metadata.context" in res.error and "g.yaml" in res.error
    assert eng.requests == [] and res.samples == ()


def test_optional_input_takes_its_default(kit):
    eng = kit.engine(["ok"])
    res = kit.rollout(
        """
        name: t
        inputs:
          document: {from: metadata.context, required: false, default: "(none)"}
        nodes:
          a: {llm: policy, prompt: [user: "doc={{ document }}"]}
        """,
        {"policy": eng},
        {"prompt": "q"},
    )
    assert res.status == "completed" and "doc=(none)" in kit.r.decode(eng.requests[0].input_ids)


def test_seed_gives_each_call_a_distinct_reproducible_sampling_seed(kit):
    graph = """
        name: t
        nodes:
          a: {llm: policy, prompt: [user: one], next: b}
          b: {llm: policy, prompt: [user: two]}
        """
    seeds = []
    for _ in range(2):
        eng = kit.engine(["x", "y"])
        plan = kit.plan(graph)
        kit.run(kit.executor(plan, {"policy": eng}), {}, seed=7)
        seeds.append([r.sampling_params["sampling_seed"] for r in eng.requests])
    assert seeds[0] == seeds[1] and len(set(seeds[0])) == 2
    eng = kit.engine(["x", "y"])
    kit.run(kit.executor(kit.plan(graph), {"policy": eng}), {})
    assert all("sampling_seed" not in r.sampling_params for r in eng.requests)


def test_sampling_params_are_made_once_per_node_and_each_call_gets_its_own_dict(kit):
    """The second visit's request has the same parameters as the first, although the first call's
    dict was given per-call keys (the seed, a context-bound max_new_tokens); per node, not shared."""
    graph = """
        name: t
        nodes:
          a: {llm: policy, prompt: [user: one], max_tokens: 64, temperature: 0.5, stop: ["END"], next: b, max_visits: 2}
          b: {llm: policy, prompt: [user: two], max_tokens: 32, next: a, max_visits: 2}
        """
    eng = kit.engine(["x", "y", "z", "w"])
    ex = kit.executor(kit.plan(graph), {"policy": eng})
    kit.run(ex, {}, seed=3)
    a1, b1, a2, b2 = (r.sampling_params for r in eng.requests)
    assert a1 is not a2 and a1["sampling_seed"] != a2["sampling_seed"]
    drop = lambda p: {k: v for k, v in p.items() if k != "sampling_seed"}
    assert drop(a1) == drop(a2) and drop(b1) == drop(b2)
    assert a1["max_new_tokens"] == 64 and a1["temperature"] == 0.5 and a1["stop"] == ["END"]
    assert b1["max_new_tokens"] == 32 and "stop" not in b1 and b1.get("temperature") != 0.5
    assert len(ex.params_cache) == 2
    for cached in ex.params_cache.values():
        assert "sampling_seed" not in cached  # the per-call key went into the call's copy only


# ---------------------------------------------------------------- foreach


FOREACH = """
    name: t
    inputs: {doc: prompt}
    state:
      last: ""
    nodes:
      read:
        llm: policy
        foreach: {over: doc, as: chunk, chunk_tokens: 50{max}}
        prompt: [user: "<section>{{ chunk }}</section> {{ loop.index }}/{{ loop.count }}"]
        update: {last: "{{ chunk }}"}
    """


def test_foreach_chunk_tokens_splits_by_tokens(kit):
    doc = " ".join(f"word{i}" for i in range(120)) + " the end."
    n_tokens = len(kit.r.encode(doc))
    expected = math.ceil(n_tokens / 50)
    assert expected >= 3
    eng = kit.engine(lambda p, i: f"m{i}")
    res = kit.rollout(FOREACH.replace("{max}", ""), {"policy": eng}, {"prompt": doc})
    assert res.status == "completed"
    assert len(eng.requests) == expected and len(res.samples) == expected
    assert res.path == tuple(("read", i) for i in range(1, expected + 1))
    chunks = []
    for i, req in enumerate(eng.requests):
        prompt = kit.r.decode(req.input_ids)
        body = prompt.split("<section>", 1)[1].split("</section>", 1)[0]
        assert prompt.split("</section> ", 1)[1].startswith(f"{i}/{expected}")
        chunks.append(body)
    assert "".join(chunks) == doc
    assert [len(kit.r.encode(c)) for c in chunks[:-1]] == [50] * (expected - 1)
    assert res.state["last"] == chunks[-1]


def test_foreach_max_caps_the_chunks(kit):
    doc = " ".join(f"word{i}" for i in range(120))
    eng = kit.engine(lambda p, i: f"m{i}")
    res = kit.rollout(FOREACH.replace("{max}", ", max: 2"), {"policy": eng}, {"prompt": doc})
    assert len(eng.requests) == 2 and len(res.samples) == 2
    assert "0/2" in kit.r.decode(eng.requests[0].input_ids)


def test_foreach_over_a_list_updates_state_between_items(kit):
    eng = kit.engine(lambda p, i: p.split("item=")[1].split("<|im_end|>")[0].upper())
    res = kit.rollout(
        """
        name: t
        state:
          got: {default: [], merge: append}
        nodes:
          each:
            llm: policy
            foreach: {over: "['a', 'b', 'c']"}
            prompt: [user: "item={{ item }} seen={{ got | length }}"]
            update: {got: "{{ output.text }}"}
        """,
        {"policy": eng},
        {},
    )
    assert res.state["got"] == ["A SEEN=0", "B SEEN=1", "C SEEN=2"]


def test_max_steps_counts_foreach_items_as_visits(kit):
    eng = kit.engine(lambda p, i: "x")
    res = kit.rollout(
        """
        name: t
        limits: {max_steps: 3}
        nodes:
          each:
            llm: policy
            foreach: {over: "[1, 2, 3, 4, 5]"}
            prompt: [user: "{{ item }}"]
        """,
        {"policy": eng},
        {},
    )
    assert res.status == "truncated" and len(eng.requests) == 3


# ---------------------------------------------------------------- rewards and credit


FANOUT = """
    name: t
    nodes:
      each:
        llm: policy
        foreach: {over: "['a', 'b', 'c']"}
        prompt: [user: "{{ item }}"]
        next: final
      final: {llm: policy, prompt: [user: final]}
    reward:
      fn: {fn}
      args: {args}
      {key}
      credit: {credit}
    """


def _fanout(kit, credit, fn="rw_fanout:score", args="{x: 0.6}", key="", module=None):
    kit.write(
        "rw_fanout.py",
        "def score(x):\n    return x\n"
        "def as_dict(x):\n    return {'score': x, 'acc': 1.0, 'pred': 'p', 'flag': True}\n",
    )
    graph = FANOUT.replace("{fn}", fn).replace("{args}", args).replace("{key}", key).replace("{credit}", credit)
    return kit.rollout(graph, {"policy": kit.engine(lambda p, i: f"r{i}")}, {})


def test_even_credit_splits_the_reward_over_siblings(kit):
    res = _fanout(kit, "even")
    assert res.status == "completed" and res.reward == 0.6 and len(res.samples) == 4
    assert [s.reward for s in res.samples] == pytest.approx([0.15] * 4)
    assert {s.rollout_id for s in res.samples} == {0} and [s.index for s in res.samples] == [0, 1, 2, 3]
    check_fanout(res.samples, res.reward, "even")
    with pytest.raises(FanoutError):
        check_fanout(res.samples, res.reward, "broadcast")


def test_broadcast_credit_gives_each_sibling_the_reward(kit):
    res = _fanout(kit, "broadcast")
    assert [s.reward for s in res.samples] == [0.6] * 4
    check_fanout(res.samples, res.reward, "broadcast")
    with pytest.raises(FanoutError):
        check_fanout(res.samples, res.reward, "even")


def test_dict_reward_with_key_credits_the_key(kit):
    res = _fanout(kit, "even", fn="rw_fanout:as_dict", key="key: score")
    assert res.reward == {"score": 0.6, "acc": 1.0, "pred": "p", "flag": True}
    assert [s.reward for s in res.samples] == pytest.approx([0.15] * 4)
    check_fanout(res.samples, 0.6, "even")


def test_dict_reward_without_key_credits_every_numeric_entry(kit):
    res = _fanout(kit, "even", fn="rw_fanout:as_dict")
    assert all(set(s.reward) == {"score", "acc"} for s in res.samples)
    check_fanout(res.samples, {"score": 0.6, "acc": 1.0}, "even")


def test_usage_in_reward_args_has_cost_tokens_and_calls(kit):
    kit.write(
        "rw_usage.py",
        "def score(usage, cost, calls):\n"
        "    assert usage['cost'] == cost\n"
        "    return {'score': 1.0, 'cost': cost, 'calls': calls, 'tokens': usage['prompt_tokens']}\n",
    )
    plan = kit.plan("""
        name: t
        models:
          policy: {price: {input: 1.0, output: 2.0}}
          helper: {url: "http://127.0.0.1:1", price: {input: 10.0, output: 20.0}}
        nodes:
          a: {llm: policy, prompt: [user: one], next: h}
          h: {llm: helper, prompt: [user: two]}
        reward:
          fn: rw_usage:score
          args: {usage: "{{ usage }}", cost: "{{ usage.cost }}", calls: "{{ usage.calls }}"}
          key: score
        """)
    pol, helper = kit.engine(["a b c"]), kit.engine(["d"])
    res = kit.run(kit.executor(plan, {"policy": pol, "helper": helper}), {})
    assert res.status == "completed", res.error
    p_in, p_out = len(pol.requests[0].input_ids), len(kit.ids("a b c"))
    h_in, h_out = len(helper.requests[0].input_ids), len(kit.ids("d"))
    expected = (p_in * 1.0 + p_out * 2.0 + h_in * 10.0 + h_out * 20.0) / 1e6
    assert res.reward["cost"] == pytest.approx(expected)
    assert res.reward["calls"] == {"a": 1, "h": 1}
    assert res.reward["tokens"] == p_in + h_in
    assert res.samples[0].reward == 1.0


def test_reward_is_computed_once_per_rollout(kit):
    kit.write("rw_once.py", "N = []\ndef score():\n    N.append(1)\n    return 1.0\n")
    import importlib

    res = kit.rollout(
        FANOUT.replace("{fn}", "rw_once:score")
        .replace("{args}", "{}")
        .replace("{key}", "")
        .replace("{credit}", "even"),
        {"policy": kit.engine(lambda p, i: "r")},
        {},
    )
    assert len(res.samples) == 4 and importlib.import_module("rw_once").N == [1]


@pytest.mark.parametrize(
    "body,needle",
    [
        ("return 1 / 0", "reward: ZeroDivisionError"),
        ("return None", "returned None"),
        ("return 'high'", "reward: ValueError"),
        ("raise ImportError('no judge library')", "reward: ImportError: no judge library"),
    ],
)
def test_a_crashing_or_invalid_reward_fails_only_this_rollout(kit, body, needle):
    module = f"rw_crash_{abs(hash(body))}"  # one module per case: imports are cached per process
    kit.write(f"{module}.py", f"def score(x):\n    if x == 'bad':\n        {body}\n    return 1.0\n")
    plan = kit.plan(
        """
        name: t
        inputs: {q: prompt}
        nodes:
          a: {llm: policy, prompt: [user: "{{ q }}"]}
        reward: {fn: "MODULE:score", args: {x: "{{ q }}"}}
        """.replace("MODULE", module)
    )
    ex = kit.executor(plan, {"policy": kit.engine(lambda p, i: "fine")})

    async def main():
        return await asyncio.gather(
            ex.run(RolloutInput(row={"prompt": "bad"}, rollout_id=0)),
            ex.run(RolloutInput(row={"prompt": "good"}, rollout_id=1)),
        )

    bad, good = asyncio.run(main())
    assert bad.status == "failed" and needle in bad.error and bad.reward is None
    assert [s.status for s in bad.samples] == ["failed"] and bad.samples[0].reward is None
    assert good.status == "completed" and good.reward == 1.0


def test_math_equal_judge_is_called_through_the_judge_model(kit):
    plan = kit.plan("""
        name: t
        inputs: {q: prompt, a: label}
        models:
          judge: {url: "http://127.0.0.1:1"}
        nodes:
          solve: {llm: policy, prompt: [user: "{{ q }}"]}
        reward:
          fn: math_equal
          args: {prediction: "{{ solve.text }}", label: "{{ a }}", question: "{{ q }}"}
          judge: judge
          key: score
        """)
    judge = kit.engine(["The two agree.\nVERDICT: True"])
    res = kit.run(
        kit.executor(plan, {"policy": kit.engine(["so \\boxed{2^{10}-1}"]), "judge": judge}, rewards=RewardBox()),
        {"prompt": "2^10-1?", "label": "1023"},
    )
    assert res.reward == {"score": 1.0, "acc": 1.0, "pred": "2^{10}-1", "gt": "1023"}
    prompt = kit.r.decode(judge.requests[0].input_ids)
    assert "2^{10}-1" in prompt and "1023" in prompt and judge.requests[0].sampling_params["temperature"] == 0.0


# ---------------------------------------------------------------- tools on the event loop


def test_sync_user_tool_runs_off_the_event_loop(kit):
    kit.write(
        "slow_tool_loop.py",
        "import time\nSPAN = []\n"
        "def slow():\n    SPAN.append(time.monotonic())\n    time.sleep(0.6)\n"
        "    SPAN.append(time.monotonic())\n    return 'slept'\n",
    )
    plan = kit.plan("""
        name: t
        inputs: {mode: prompt}
        nodes:
          route:
            switch: mode
            cases: {slow: wait}
            default: chat
          wait: {tool: "slow_tool_loop:slow", args: {}}
          chat:
            llm: policy
            prompt: [user: "turn {{ visit }}"]
            max_visits: 5
            next: chat
        """)
    stamps: list[float] = []

    def reply(prompt, i):
        stamps.append(time.monotonic())
        return "ok"

    ex = kit.executor(plan, {"policy": kit.engine(reply, delay_s=0.05)})

    async def main():
        return await asyncio.gather(
            ex.run(RolloutInput(row={"prompt": "slow"}, rollout_id=0)),
            ex.run(RolloutInput(row={"prompt": "fast"}, rollout_id=1)),
        )

    slow, fast = asyncio.run(main())
    import importlib

    start, end = importlib.import_module("slow_tool_loop").SPAN
    assert slow.status == fast.status == "completed"
    assert slow.state == {} and fast.samples and len(stamps) == 5
    # every engine call of the other rollout happened while the sync tool slept
    assert all(start < t < end for t in stamps)


def test_crashing_tool_becomes_an_observation_with_ok_false(kit):
    kit.write("crash_tool_obs.py", "def boom(x):\n    raise RuntimeError(f'kaput {x}')\n")
    res = kit.rollout(
        """
        name: t
        state:
          seen: ""
        nodes:
          run:
            tool: "crash_tool_obs:boom"
            args: {x: 7}
            update: {seen: "{{ output.text }}"}
            next:
              - {when: not output.ok, goto: handle}
              - goto: end
          handle:
            llm: policy
            prompt: [user: "the tool said {{ run.text }} ({{ run.error }})"]
        """,
        {"policy": (eng := kit.engine(["noted"]))},
        {},
    )
    assert res.status == "completed"
    assert [n for n, _ in res.path] == ["run", "handle"]
    assert "RuntimeError: kaput 7" in res.state["seen"]
    assert res.calls[0].node == "run" and res.calls[0].finish_reason == "error"
    assert "RuntimeError: kaput 7" in res.calls[0].error
    assert "the tool said" in kit.r.decode(eng.requests[0].input_ids)


def test_tool_observation_is_cut_to_max_chars(kit):
    kit.write("long_tool_obs.py", "def big():\n    return 'A' * 50 + 'B' * 50\n")
    res = kit.rollout(
        """
        name: t
        state:
          seen: ""
        nodes:
          run:
            tool: "long_tool_obs:big"
            max_chars: 20
            update: {seen: "{{ output.text }}"}
        """,
        {},
        {},
    )
    assert res.state["seen"].startswith("A" * 10) and res.state["seen"].endswith("B" * 10)
    assert "[80 characters cut]" in res.state["seen"]


class WarmUpRecorderForTests(ToolBox):
    """The real ToolBox, recording the executor's `warm_up` calls instead of starting anything."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.warm_ups: list[frozenset[str]] = []

    def warm_up(self, tools):
        self.warm_ups.append(frozenset(tools))


TOOLS_IN_A_CHILD = """
name: warm
inputs: {question: prompt}
nodes:
  ask:
    llm: policy
    prompt: "{{ question }}"
    next: work
  work:
    graph:
      inputs: {question: prompt}
      nodes:
        look:
          tool: retrieve
          args: {url: "http://127.0.0.1:9/retrieve", query: "{{ question }}"}
          next: run
        run:
          tool: python
          args: {code: "print(1)"}
    inputs: {question: "{{ question }}"}
"""


def test_each_rollout_warms_up_the_tools_its_graph_and_sub_graphs_call(kit):
    tools = WarmUpRecorderForTests([kit.dir])
    ex = kit.executor(kit.plan(TOOLS_IN_A_CHILD), {"policy": kit.engine(["a", "b"])}, tools=tools)
    for i in range(2):
        res = kit.run(ex, {"prompt": "q"}, rollout_id=i)
        assert [c.endpoint for c in res.calls][1:] == ["tool:retrieve", "tool:python"], res.error
    assert tools.warm_ups == [frozenset({"python", "retrieve"})] * 2
    bare = WarmUpRecorderForTests([kit.dir])
    kit.run(
        kit.executor(
            kit.plan('name: g\nnodes:\n  a: {llm: policy, prompt: "hi"}\n'), {"policy": kit.engine(["x"])}, tools=bare
        ),
        {},
    )
    assert bare.warm_ups == []  # no tool nodes: nothing to warm up


def test_visits_of_a_node_that_has_not_run_yet_is_zero(kit):
    """`visits` is "node id -> number of visits so far": `visits.revise + 1` before `revise` ran is 1,
    not an undefined value that fails the rollout (a graph written from the docs did this)."""
    res = kit.rollout(
        """
        name: t
        state:
          seen: {default: [], merge: append}
        nodes:
          draft:
            llm: policy
            prompt: [user: "draft; revisions so far {{ visits.revise }}"]
            update: {seen: "{{ visits.revise + 1 }}"}
            next: revise
          revise:
            llm: policy
            prompt: [user: "revise {{ visits.revise + 1 }}"]
            max_visits: 2
            update: {seen: "{{ visits.revise }}"}
            next: revise
        """,
        {"policy": kit.engine(["a", "b", "c"])},
        {},
    )
    assert res.status == "completed", res.error
    assert res.state["seen"] == [1, 1, 2]
