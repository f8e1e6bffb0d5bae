"""Named constants at run time, and foreach over a text refused (issue: it iterated characters)."""

from __future__ import annotations


def test_constants_bound_limits_and_conditions(kit):
    res = kit.rollout(
        """\
        name: constants
        constants: {max_turns: 3, greeting: "Hello"}
        inputs: {question: prompt}
        nodes:
          turn:
            llm: policy
            prompt: [{user: "{{ greeting }}: {{ question }}"}]
            max_visits: $max_turns
            next:
              - {when: "visit < max_turns + 10", goto: turn}
              - goto: end
        """,
        {"policy": kit.engine(["a", "b", "c", "d"])},
        {"prompt": "Q"},
    )
    assert res.status == "completed", res.error
    assert [p for p in res.path] == [("turn", 1), ("turn", 2), ("turn", 3)]  # max_visits from the constant
    assert kit.r.decode(res.samples[0].prompt_ids).count("Hello: Q") == 1


def test_foreach_over_a_text_known_only_at_run_time_fails_located(kit):
    res = kit.rollout(
        """\
        name: foreach_text
        inputs: {question: prompt, docs: metadata.docs}
        nodes:
          read:
            llm: policy
            prompt: [{user: "{{ item }}"}]
            foreach: docs
        """,
        {"policy": kit.engine(["x"] * 20)},
        {"prompt": "Q", "metadata": {"docs": "abcdef"}},
    )
    assert res.status == "failed"
    assert "g.yaml:" in res.error and "once per character" in res.error and "chunk_tokens" in res.error
    assert res.calls == ()  # nothing ran


def test_foreach_over_a_list_still_runs_per_item(kit):
    res = kit.rollout(
        """\
        name: foreach_list
        inputs: {question: prompt, docs: metadata.docs}
        nodes:
          read:
            llm: policy
            prompt: [{user: "{{ item }}"}]
            foreach: docs
        """,
        {"policy": kit.engine(["x"] * 20)},
        {"prompt": "Q", "metadata": {"docs": ["a", "b"]}},
    )
    assert res.status == "completed", res.error
    assert len(res.calls) == 2
