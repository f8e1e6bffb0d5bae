"""graphs/retool.yaml over HTTP: the real SGLang client against `graphrl serve --model tiny`, with the
real python sandbox. The tiny model's text is steered with SGLang's `regex` sampling parameter (first
call: a code block that stops on `</code>`; second call: the answer), so the rollout takes the code
branch whatever the random weights say. Pins the in-response layout as the server saw it: no turn
markers between a policy span and its interpreter output, mask 0 on the observation tokens, and the
ids each `/generate` request carried are exactly the sample's ids up to that point."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("outlines_core")

from graphrl.compilers.lower import plan_from_path
from graphrl.engines.base import Generation
from graphrl.engines.sglang import SGLangEngine
from graphrl.models.tokenizer import QWEN_TOKEN_IDS
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.runtime.services import StaticEndpoints
from graphrl.tools.registry import ToolBox

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="the python sandbox is Linux")]
REPO = Path(__file__).resolve().parents[2]
IM_START, IM_END = QWEN_TOKEN_IDS["<|im_start|>"], QWEN_TOKEN_IDS["<|im_end|>"]
sys.path.insert(0, str(Path(__file__).parent))
from tinyserver import tiny_server as serve_tiny

# what each policy call must generate (the whole output matches; the server then allows only EOS)
STEER = [r"Let me compute\.\n<code>\nprint\(6 \* 7\)\n</code>", r"So it is 42\.\nAnswer: \\boxed\{42\}"]


class Steered:
    """The SGLang client, with a regex added to each call's sampling parameters; records what it sent."""

    def __init__(self, client: SGLangEngine):
        self.client = client
        self.sent: list[tuple[list[int], dict[str, Any]]] = []

    async def generate(
        self, input_ids: Sequence[int], sampling_params: Mapping[str, Any], *, session_id: str | None = None
    ) -> Generation:
        params = {**sampling_params, "regex": STEER[min(len(self.sent), len(STEER) - 1)]}
        self.sent.append((list(input_ids), params))
        return await self.client.generate(input_ids, params, session_id=session_id)

    async def close(self) -> None:
        await self.client.close()


def test_retool_in_response_layout_over_http(kit):
    plan, diags = plan_from_path(REPO / "graphs" / "retool.yaml")
    assert plan is not None, diags
    with serve_tiny() as url:
        engine = Steered(SGLangEngine(url))
        ex = Executor(
            plan,
            StaticEndpoints({"policy": engine}, kit.r),
            tools=ToolBox([kit.dir]),
            rewards=RewardBox([REPO / "graphs"]),
            sampling={"temperature": 0.0, "top_p": 1.0, "top_k": -1},
        )

        async def main():
            try:
                return await ex.run(RolloutInput(row={"prompt": "What is 6 times 7?", "label": "42"}, rollout_id=5))
            finally:
                await engine.close()

        res = asyncio.run(main())
    assert res.status == "completed", res.error
    assert [n for n, _ in res.path] == ["reason", "run", "reason"]
    assert res.reward["acc"] == 1.0 and res.reward["tool_calls"] == 1
    (s,) = res.samples
    s.check_invariants()
    assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [
        ("reason", "generated", 1),
        ("run", "observation", 0),
        ("reason", "generated", 1),
    ]
    gen1, obs, gen2 = s.spans
    # the first output is the server's, stopped on the stop string (no <|im_end|>), then the observation
    assert kit.r.decode(s.response_ids[gen1.start : gen1.end]) == "Let me compute.\n<code>\nprint(6 * 7)\n</code>"
    assert kit.r.decode(s.response_ids[obs.start : obs.end]) == "\n\n<interpreter>\n42\n</interpreter>\n\n"
    assert kit.r.decode(s.response_ids[gen2.start : gen2.end]).startswith("So it is 42.\nAnswer: \\boxed{42}")
    before_answer = s.response_ids[: gen2.start]
    assert IM_START not in before_answer and IM_END not in before_answer
    assert all(m == 0 for m in s.loss_mask[obs.start : obs.end])
    assert all(m == 1 for m in s.loss_mask[gen1.start : gen1.end])
    assert all(lp == 0.0 for lp in s.rollout_log_probs[obs.start : obs.end])
    # what the server was sent: the sample's ids, exactly, up to each call
    assert len(engine.sent) == 2
    assert engine.sent[0][0] == list(s.prompt_ids)
    assert engine.sent[1][0] == list(s.tokens[: len(s.prompt_ids) + gen2.start])
    # and the server's own count of the prompt it received agrees with the ids sent
    calls = [c for c in res.calls if not c.endpoint.startswith("tool:")]
    assert [c.prompt_tokens for c in calls] == [len(ids) for ids, _ in engine.sent]
