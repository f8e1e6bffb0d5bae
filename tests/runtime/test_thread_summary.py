"""Thread summarisation (`threads.NAME.on_overflow: summarize`): past the budget, the messages after
the opening ones but the newest `keep_last` are replaced by one summary message written by an LLM
call; the thread's sample ends, a new one starts whose prompt is exactly what the engine is sent; a
trained summary call (policy, `train: true`) is a sample of its own; a summary that does not fit ends
the rollout truncated, located."""

from __future__ import annotations

from graphrl.compilers.lower import plan_from_path

GRAPH = """
name: summarised
models:
  writer: {url: "http://127.0.0.1:30001"}
inputs:
  question: prompt
threads:
  chat:
    prompt:
      - system: "You are terse."
      - user: "{{ question }}"
    max_tokens: BUDGET
    on_overflow: summarize
    summarize:
      llm: MODEL
      prompt:
        - system: "Summarise the conversation."
        - user: "{% for m in dropped %}[{{ m.role }}] {{ m.content }}\\n{% endfor %}"
      keep_last: 2
      content: "Summary so far: {{ summary }}"
      max_tokens: SUMMARY_TOKENS
      train: TRAIN
nodes:
  talk:
    llm: policy
    thread: chat
    max_visits: 6
    append_to: {thread: chat, role: user, content: "Turn {{ visit }}: tell me more about it, with some detail."}
    next: talk
"""
REPLY = "Here is one more sentence with a few words."
SUMMARY = "They discussed the harbour."


def _graph(budget: int = 120, model: str = "writer", train: bool = False, summary_tokens: int = 32) -> str:
    return (
        GRAPH.replace("BUDGET", str(budget))
        .replace("MODEL", model)
        .replace("TRAIN", str(train).lower())
        .replace("SUMMARY_TOKENS", str(summary_tokens))
    )


def test_older_messages_are_replaced_by_a_summary_as_a_new_sample(kit):
    plan = kit.plan(_graph())
    policy, writer = kit.engine([REPLY] * 6), kit.engine([SUMMARY] * 6)
    res = kit.run(kit.executor(plan, {"policy": policy, "writer": writer}), {"prompt": "Tell me."})
    assert res.status == "completed", res.error
    assert len(writer.requests) >= 1 and len(res.samples) == 1 + len(writer.requests)
    # the summary call saw the replaced messages (the oldest reply and turn), not the opening ones
    first_summary_prompt = kit.r.decode(writer.requests[0].input_ids)
    assert f"[assistant] {REPLY}" in first_summary_prompt and "[user] Turn 1:" in first_summary_prompt
    assert "[system]" not in first_summary_prompt and "[user] Tell me." not in first_summary_prompt
    later = kit.r.decode(res.samples[1].prompt_ids)
    opening = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nTell me.<|im_end|>\n"
    assert later.startswith(opening + f"<|im_start|>user\nSummary so far: {SUMMARY}<|im_end|>\n")
    # keep_last: 2 -> the newest reply and the newest turn follow the summary, then the generation prompt
    rest = later[len(opening) :].split("<|im_start|>")[2:]
    assert [m.split("\n", 1)[0] for m in rest] == ["assistant", "user", "assistant"]
    assert rest[-1] == "assistant\n"
    for s in res.samples:
        s.check_invariants()
        assert len(s.prompt_ids) <= 120
        assert all(sp.node == "talk" for sp in s.spans)  # an untrained summary call is in no sample
    # the summary calls are the rollout's calls too (usage, trajectories): on the writer's endpoint
    assert [c.endpoint for c in res.calls].count("writer") == len(writer.requests)
    # the first sample ends with its last output, as generated
    assert res.samples[0].spans[-1].kind == "generated" and res.samples[0].spans[-1].mask == 1


def test_the_engine_is_sent_exactly_the_new_sample_ids(kit):
    plan = kit.plan(_graph())
    policy = kit.engine([REPLY] * 6)
    res = kit.run(kit.executor(plan, {"policy": policy, "writer": kit.engine([SUMMARY] * 6)}), {"prompt": "Tell me."})
    prompts = [s.prompt_ids for s in res.samples]
    for s in res.samples[1:]:  # each restart's first call is exactly the new sample's prompt
        assert any(req.input_ids == s.prompt_ids for req in policy.requests)
    for req in policy.requests:  # and every call is a prefix of the sample it extends
        assert any(s.tokens[: len(req.input_ids)] == req.input_ids for s in res.samples), prompts


def test_a_trained_policy_summary_is_a_sample_of_its_own(kit):
    plan = kit.plan(_graph(model="policy", train=True))
    policy = kit.by_prompt({"Summarise the conversation.": SUMMARY}, default=REPLY)
    res = kit.run(kit.executor(plan, {"policy": policy}), {"prompt": "Tell me."})
    assert res.status == "completed", res.error
    summaries = [s for s in res.samples if "Summarise the conversation." in kit.r.decode(s.prompt_ids)]
    assert summaries
    s = summaries[0]
    s.check_invariants()
    assert kit.response_text(s).startswith(SUMMARY) and set(s.loss_mask) == {1}
    i = res.samples.index(s)  # between the thread sample it ends and the one it starts
    assert 0 < i < len(res.samples) - 1
    assert f"Summary so far: {SUMMARY}" in kit.r.decode(res.samples[i + 1].prompt_ids)
    assert plan.training.fanout


def test_an_untrained_policy_summary_trains_nothing(kit):
    plan = kit.plan(_graph(model="policy"))
    policy = kit.by_prompt({"Summarise the conversation.": SUMMARY}, default=REPLY)
    res = kit.run(kit.executor(plan, {"policy": policy}), {"prompt": "Tell me."})
    assert res.status == "completed", res.error
    assert not any("Summarise the conversation." in kit.r.decode(s.prompt_ids) for s in res.samples)
    assert any(f"Summary so far: {SUMMARY}" in kit.r.decode(s.prompt_ids) for s in res.samples)


def test_a_summary_that_does_not_fit_truncates_the_rollout(kit):
    long_summary = "and then " * 40
    plan = kit.plan(_graph(summary_tokens=200))
    res = kit.run(
        kit.executor(plan, {"policy": kit.engine([REPLY] * 6), "writer": kit.engine([long_summary] * 6)}),
        {"prompt": "Tell me."},
    )
    assert res.status == "truncated"
    assert "g.yaml:" in res.error and "thread 'chat'" in res.error and "(summarised " in res.error
    assert "120-token budget" in res.error


def test_the_summary_is_cut_to_its_max_tokens(kit):
    plan = kit.plan(_graph())
    writer = kit.engine(["and then " * 40] * 6)
    res = kit.run(kit.executor(plan, {"policy": kit.engine([REPLY] * 6), "writer": writer}), {"prompt": "Tell me."})
    assert res.status == "completed", res.error
    assert all(req.sampling_params["max_new_tokens"] == 32 for req in writer.requests)


def test_a_budget_too_small_for_the_opening_truncates_without_a_summary_call(kit):
    question = "Tell me everything you know about the long history of the harbour town and its ships."
    writer = kit.engine([SUMMARY] * 6)
    plan = kit.plan(_graph(budget=40))
    res = kit.run(
        kit.executor(plan, {"policy": kit.engine(["word " * 30] * 6), "writer": writer}), {"prompt": question}
    )
    assert res.status == "truncated" and "nothing to summarise" in res.error
    assert writer.requests == []


def test_a_summarised_thread_called_again_compiles_as_fan_out(kit):
    plan, _ = plan_from_path(kit.write("g.yaml", _graph()))
    assert plan is not None and plan.training.fanout
    assert plan.threads["chat"].summarize is not None and plan.threads["chat"].on_overflow == "summarize"
