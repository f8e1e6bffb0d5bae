"""limits.max_prompt_tokens: an over-long prompt fails its rollout before any engine call."""

from __future__ import annotations


def test_a_prompt_far_over_the_bound_fails_before_tokenising(kit):
    plan = kit.plan("""\
        name: huge
        inputs: {question: prompt}
        limits: {max_prompt_tokens: 100}
        nodes:
          solve: {llm: policy, prompt: [{user: "{{ question }}"}]}
        """)
    engine = kit.engine(["x"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "word " * 2000})
    assert res.status == "failed" and "g.yaml:" in res.error and "refused before tokenising" in res.error
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "word " * 150})
    assert res.status == "failed" and "tokens, over limits.max_prompt_tokens (100)" in res.error
    assert engine.requests == []
