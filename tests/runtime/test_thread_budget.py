"""Thread token budgets (`threads.NAME.max_tokens`): past the budget, the oldest messages after the
opening ones are dropped, whole, from a user turn on; the thread restarts from that rendering as a
new training sample (token-exact: the engine is sent exactly the new sample's ids); a budget that
not even the opening and the newest turn fit ends the rollout truncated, located."""

from __future__ import annotations

from graphrl.compilers.lower import plan_from_path

GRAPH = """
name: budget
inputs:
  question: prompt
threads:
  chat:
    prompt:
      - system: "You are terse."
      - user: "{{ question }}"
    max_tokens: BUDGET
nodes:
  talk:
    llm: policy
    thread: chat
    max_visits: 6
    append_to: {thread: chat, role: user, content: "Turn {{ visit }}: tell me more about it, with some detail."}
    next: talk
"""


def test_the_thread_is_cut_to_its_budget_as_a_new_sample(kit):
    reply = "Here is one more sentence with a few words."
    res = kit.rollout(GRAPH.replace("BUDGET", "120"), {"policy": kit.engine([reply] * 6)}, {"prompt": "Tell me."})
    assert res.status == "completed", res.error
    assert len(res.samples) >= 2  # at least one truncation restarted the thread
    engine_prompts = []
    for s in res.samples:
        assert len(s.prompt_ids) <= 120
        text = kit.r.decode(s.prompt_ids)
        assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nTell me.")
        engine_prompts.append(s.prompt_ids)
    first_full = kit.r.decode(res.samples[0].tokens)
    later = kit.r.decode(res.samples[1].prompt_ids)
    assert first_full.count(reply) > later.count(reply)  # the oldest replies were dropped ...
    assert later.count("Turn ") >= 1 and later.rstrip().endswith("<|im_start|>assistant")  # ... the newest kept
    # the opening user message is followed by a kept user turn, never by an orphaned assistant reply
    after_opening = later.split("Tell me.<|im_end|>\n", 1)[1]
    assert after_opening.startswith("<|im_start|>user\nTurn ")


def test_the_engine_gets_exactly_the_sample_ids(kit):
    reply = "Here is one more sentence with a few words."
    plan = kit.plan(GRAPH.replace("BUDGET", "120"))
    engine = kit.engine([reply] * 6)
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Tell me."})
    tokens = [s.tokens for s in res.samples]
    for req in engine.requests:
        assert any(t[: len(req.input_ids)] == req.input_ids for t in tokens)


def test_a_budget_too_small_for_the_newest_turn_truncates_the_rollout(kit):
    question = "Tell me everything you know about the long history of the harbour town and its ships."
    res = kit.rollout(GRAPH.replace("BUDGET", "40"), {"policy": kit.engine(["word " * 30] * 6)}, {"prompt": question})
    assert res.status == "truncated"
    assert "g.yaml:" in res.error and "thread 'chat'" in res.error and "40-token budget" in res.error


def test_a_budgeted_thread_called_again_compiles_as_fan_out(kit):
    path = kit.write("g.yaml", GRAPH.replace("BUDGET", "120"))
    plan, diags = plan_from_path(path)
    assert plan is not None and plan.training.fanout
