"""Chat templates that rewrite history (Qwen3-style: earlier <think> blocks dropped once a new user
turn arrives): at run time, re-rendering the thread does not reproduce the ids already trained, and
the thread's `on_drift` decides -- a new training sample from the re-rendered conversation
(`new_sample`) or a failed rollout with the first differing text (`fail`, the default). Token-level, real Qwen tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

THINK = "<think>\nsmall sum\n</think>\n\n4"
TEMPLATE = (Path(__file__).resolve().parents[1] / "fixtures" / "invalid" / "prompts" / "qwen3_style.jinja").read_text()

GRAPH = """\
name: rewrite
inputs: {question: prompt}
models:
  policy: {chat_template: qwen3_style.jinja}
threads:
  main:
    prompt: [user: "{{ question }}"]
    ON_DRIFT
nodes:
  solve:
    llm: policy
    thread: main
    max_visits: 2
    next:
      - {when: "visit < 2", goto: again}
      - goto: end
  again:
    append_to: {thread: main, role: user, content: "and 3+3?"}
    next: solve
reward:
  fn: exact_match
  args: {prediction: "{{ solve.text }}", label: "6"}
  credit: even
"""


def _encode(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def _plan(kit, on_drift: str | None):
    kit.write("qwen3_style.jinja", TEMPLATE)
    return kit.plan(GRAPH.replace("ON_DRIFT", f"on_drift: {on_drift}" if on_drift else ""))


def test_the_default_is_fail_and_one_sample(kit):
    plan = _plan(kit, None)
    assert plan.threads["main"].on_drift == "fail" and not plan.training.fanout


def test_a_rewritten_history_starts_a_new_sample_with_new_sample(kit, tok):
    plan = _plan(kit, "new_sample")
    assert plan.threads["main"].on_drift == "new_sample" and plan.training.fanout
    engine = kit.engine([THINK, "6"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "2+2?"}, rollout_id=7)
    assert res.status == "completed", res.error
    first, second = res.samples
    # sample 1: the first prompt and the policy's output, exactly as generated (<think> kept)
    p1 = tok.apply_chat_template(
        [{"role": "user", "content": "2+2?"}], chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    assert list(first.tokens) == _encode(tok, p1) + list(kit.ids(THINK))
    assert [sp.mask for sp in first.spans] == [1]
    # sample 2: the whole conversation as the template now renders it (no <think>), then the output
    history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": THINK},
        {"role": "user", "content": "and 3+3?"},
    ]
    p2 = tok.apply_chat_template(history, chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True)
    assert "<think>" not in p2
    assert list(second.prompt_ids) == _encode(tok, p2) == list(engine.requests[1].input_ids)
    assert list(second.response_ids) == list(kit.ids("6")) and [sp.mask for sp in second.spans] == [1]
    # one rollout: both samples carry its id, and its reward is credited once across them
    assert {s.rollout_id for s in res.samples} == {7}
    assert res.reward == 1.0 and sum(s.reward for s in res.samples) == pytest.approx(1.0)


def test_on_drift_fail_ends_the_rollout_with_the_differing_text(kit):
    plan = _plan(kit, "fail")
    assert not plan.training.fanout
    res = kit.run(kit.executor(plan, {"policy": kit.engine([THINK, "6"])}), {"prompt": "2+2?"})
    assert res.status == "failed"
    assert "not append-only" in res.error and "<think>" in res.error and "message 1 ('assistant')" in res.error
    assert "g.yaml:8:" in res.error and "thread 'main' at 'solve' (visit 2)" in res.error  # at on_drift: fail
