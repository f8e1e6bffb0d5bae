"""Bad engine output is never trained: ids outside the vocabulary, a completion count that disagrees
with the log-probs, an abort before the first token; and the client timeout is a graph setting."""

from __future__ import annotations

import asyncio
import time

import pytest

from graphrl.engines.base import EngineError, FinishReason
from graphrl.engines.scripted import Scripted
from graphrl.engines.sglang import parse_generate_response


def _body(ids, *, completion=None, finish="stop"):
    meta = {
        "finish_reason": {"type": finish},
        "prompt_tokens": 3,
        "output_token_logprobs": [[-0.1, i, None] for i in ids],
    }
    if completion is not None:
        meta["completion_tokens"] = completion
    return {"text": "", "output_ids": list(ids), "meta_info": meta}


def test_a_completion_count_that_disagrees_with_the_logprobs_is_an_engine_error():
    assert parse_generate_response(_body([5, 6], completion=2)).output_ids == (5, 6)
    with pytest.raises(EngineError, match="completion_tokens"):
        parse_generate_response(_body([5, 6], completion=3))
    # a request aborted in the queue may report a count with no tokens
    assert parse_generate_response(_body([], completion=0, finish="abort")).output_ids == ()


GRAPH = """\
name: bounds
inputs: {question: prompt}
nodes:
  solve: {llm: policy, prompt: [{user: "{{ question }}"}]}
"""


@pytest.mark.parametrize("bad", [155_528, 2_147_483_705])
def test_ids_outside_the_vocabulary_fail_the_rollout_and_train_nothing(kit, bad):
    plan = kit.plan(GRAPH)
    reply = Scripted(output_ids=(9, bad, 10), logprobs=(-0.1,) * 3, finish_reason=FinishReason("stop", matched=10))
    res = kit.run(kit.executor(plan, {"policy": kit.engine([reply])}), {"prompt": "Q"})
    assert res.status == "failed" and str(bad) in res.error and "vocabulary" in res.error
    assert res.samples == ()


def test_an_abort_before_the_first_token_ends_aborted_not_failed(kit):
    plan = kit.plan(GRAPH)
    reply = Scripted(output_ids=(), logprobs=(), finish_reason=FinishReason("abort", message="queued abort"))
    res = kit.run(kit.executor(plan, {"policy": kit.engine([reply])}), {"prompt": "Q"})
    assert res.status == "aborted" and "LedgerError" not in (res.error or "")
    assert res.samples == ()


def test_the_client_timeout_is_a_model_setting(kit, tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))
    from faultkit import FaultySGLangServerForTests, scripted_faults

    from graphrl.app.endpoints import build_endpoints
    from graphrl.compilers.lower import plan_from_path
    from graphrl.rewards.scorer import RewardBox
    from graphrl.runtime.executor import Executor, RolloutInput
    from graphrl.tools.registry import ToolBox

    with FaultySGLangServerForTests(kit.tok, faults=scripted_faults("hang"), hang_s=30) as server:
        path = kit.write("t.yaml", GRAPH.replace("inputs:", "models:\n  policy: {timeout_s: 1.5}\ninputs:"))
        plan, diags = plan_from_path(path)
        assert plan is not None, diags
        eps = build_endpoints(plan, engine="sglang", url=server.url, tokenizer="qwen", timeout_s=900)
        ex = Executor(plan, eps, tools=ToolBox(), rewards=RewardBox())

        async def main():
            try:
                return await ex.run(RolloutInput(row={"prompt": "Q"}, rollout_id=0))
            finally:
                await eps.close()

        t0 = time.monotonic()
        res = asyncio.run(main())
        took = time.monotonic() - t0
    assert res.status == "failed" and "timed out after 1.5s" in res.error
    assert took < 20  # the model's 1.5 s, not the 900 s default nor the server's 30 s hang


def test_the_bound_is_the_models_embedding_rows_when_known(tmp_path):
    """Qwen2.5's tokenizer has 151,669 ids but the model 151,936 embedding rows: an id in between is a
    legal model output (the `tiny` model emits them), one at or past the rows is not."""
    from graphrl.models.registry import embedding_rows
    from graphrl.models.tokenizer import qwen_tokenizer
    from graphrl.runtime.chat import ChatRenderer

    tok = qwen_tokenizer()
    assert ChatRenderer(tok).vocab_size == len(tok) == 151_669
    assert ChatRenderer(tok, vocab_size=embedding_rows("tiny")).vocab_size == 151_936
    assert ChatRenderer(tok, vocab_size=10).vocab_size == len(tok)  # never below the tokenizer's ids
    assert embedding_rows("qwen") is None
    (tmp_path / "config.json").write_text('{"vocab_size": 152064}')
    assert embedding_rows(tmp_path) == 152_064
    (tmp_path / "config.json").write_text("not json")
    assert embedding_rows(tmp_path) is None and embedding_rows(tmp_path / "missing") is None


def test_an_id_in_the_padded_rows_trains_when_the_renderer_knows_them(kit):
    from graphrl.runtime.chat import ChatRenderer

    plan = kit.plan(GRAPH)
    padded = 151_700  # past len(tokenizer), below the 151,936 embedding rows
    reply = Scripted(output_ids=(9, padded, 10), logprobs=(-0.1,) * 3, finish_reason=FinishReason("stop", matched=10))
    narrow = kit.r
    kit.r = ChatRenderer(narrow.tokenizer, vocab_size=151_936)
    res = kit.run(kit.executor(plan, {"policy": kit.engine([reply])}), {"prompt": "Q"})
    kit.r = narrow
    assert res.status != "failed", res.error
    assert padded in res.samples[0].tokens
    narrow = kit.run(kit.executor(plan, {"policy": kit.engine([reply])}), {"prompt": "Q"})
    assert narrow.status == "failed" and str(padded) in narrow.error
