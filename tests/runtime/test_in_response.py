"""In-response observations (`append_to: {in_response: true}`): the Search-R1 / ReTool token layout.

One sample = prompt, then policy tokens (mask 1), observation tokens (mask 0), policy tokens, with no
turn markers (`<|im_start|>` / `<|im_end|>`) between a policy span and its observation; the engine
continues from exactly those ids. Tested with the real Qwen tokenizer and a scripted engine, and over
HTTP against `graphrl serve --model tiny` with the SGLang client.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from graphrl.app.endpoints import build_endpoints
from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted
from graphrl.models.tokenizer import QWEN_TOKEN_IDS
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.tools.registry import ToolBox

IM_START, IM_END = QWEN_TOKEN_IDS["<|im_start|>"], QWEN_TOKEN_IDS["<|im_end|>"]

GRAPH = """\
name: search_in_response
inputs: {question: prompt}
threads:
  main: {prompt: [{user: "{{ question }}"}]}
nodes:
  think:
    llm: policy
    thread: main
    stop: ["</search>"]
    max_tokens: MAXTOK
    max_visits: 3
    parse: {tags: [search, answer]}
    next:
      - when: "visit < 2"
        goto: search
      - goto: end
  search:
    tool: "lookup:lookup"
    args: {query: "{{ think.search }}"}
    append_to: {thread: main, in_response: true, content: "\\n\\n<information>{{ output }}</information>\\n\\n"}
    next: think
"""

TOOL = 'def lookup(query=None):\n    return "Paris is the capital of France."\n'


def _graph(kit, max_tokens: int = 64):
    kit.write("lookup.py", TOOL)
    return kit.plan(GRAPH.replace("MAXTOK", str(max_tokens)))


def _stop_string(kit, text: str, matched: str) -> Scripted:
    ids = kit.ids(text, stop=False)  # stopped on a stop string: no stop token
    return Scripted(output_ids=ids, logprobs=(-0.5,) * len(ids), finish_reason=FinishReason("stop", matched=matched))


def test_observation_sits_inside_the_response_with_no_turn_markers(kit):
    plan = _graph(kit)
    first = "<think>look it up</think><search>capital of France</search>"
    engine = kit.engine([_stop_string(kit, first, "</search>"), "<answer>Paris</answer>"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "What is the capital of France?"})
    assert res.status == "completed", res.error
    (s,) = res.samples
    assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [
        ("think", "generated", 1),
        ("search", "observation", 0),
        ("think", "generated", 1),
    ]
    response = s.response_ids
    assert IM_START not in response and IM_END not in response[:-1]  # only the final stop token
    obs = "\n\n<information>Paris is the capital of France.</information>\n\n"
    assert kit.r.decode(response) == first + obs + "<answer>Paris</answer><|im_end|>"
    # the second call continued from exactly the first call's ids + its output + the observation ids
    call1, call2 = engine.requests
    out1 = kit.ids(first, stop=False)
    assert call2.input_ids == call1.input_ids + out1 + tuple(kit.r.encode(obs))
    assert s.tokens == call2.input_ids + kit.ids("<answer>Paris</answer>")
    # masks: 1 exactly on what the engine sampled
    assert sum(s.loss_mask) == len(out1) + len(kit.ids("<answer>Paris</answer>"))


def test_a_new_turn_after_in_response_text_closes_the_response_with_the_template(kit):
    kit.write("lookup.py", TOOL)
    plan = kit.plan("""\
        name: close_then_user
        inputs: {question: prompt}
        threads:
          main: {prompt: [{user: "{{ question }}"}]}
        nodes:
          think:
            llm: policy
            thread: main
            stop: ["</search>"]
            next: search
          search:
            tool: "lookup:lookup"
            append_to: {thread: main, in_response: true, content: "<information>{{ output }}</information>"}
            next: ask
          ask:
            llm: policy
            thread: main
            prompt: [{user: "Now answer."}]
        """)
    first = "<search>q</search>"
    engine = kit.engine([_stop_string(kit, first, "</search>"), "Paris"])
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q?"})
    assert res.status == "completed", res.error
    text = kit.r.decode(res.samples[0].response_ids)
    assert text.startswith(
        first + "<information>Paris is the capital of France.</information><|im_end|>\n"
        "<|im_start|>user\nNow answer.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_in_response_text_after_a_stop_token_follows_the_token_as_the_recipe_does(kit):
    """Search-R1's recipe appends its correction after an output that ended its turn: the sampled
    <|im_end|> stays in the sample (trained, as sampled) and the text follows it (masked)."""
    plan = _graph(kit)
    engine = kit.engine(["I do not know", "<answer>Paris</answer>"])  # the first ends with <|im_end|>
    res = kit.run(kit.executor(plan, {"policy": engine}), {"prompt": "Q?"})
    assert res.status == "completed", res.error
    (s,) = res.samples
    first = kit.ids("I do not know")
    assert s.response_ids[: len(first)] == first and first[-1] == IM_END
    assert [(sp.node, sp.kind, sp.mask) for sp in s.spans] == [
        ("think", "generated", 1),
        ("search", "observation", 0),
        ("think", "generated", 1),
    ]
    assert engine.requests[1].input_ids == engine.requests[0].input_ids + s.response_ids[: s.spans[1].end]


sys.path.insert(0, str(Path(__file__).parent))
from tinyserver import tiny_server as serve_tiny


@pytest.mark.slow
def test_in_response_layout_through_the_sglang_client_against_graphrl_serve(kit):
    plan = _graph(kit, max_tokens=4)  # cut by length: no stop token, the response goes on
    with serve_tiny() as url:
        eps = build_endpoints(plan, engine="sglang", url=url, tokenizer="qwen")
        ex = Executor(
            plan,
            eps,
            tools=ToolBox([kit.dir]),
            rewards=RewardBox([kit.dir]),
            sampling={"temperature": 0.0, "top_p": 1.0, "top_k": -1},
        )

        async def main():
            try:
                return await ex.run(RolloutInput(row={"prompt": "Where is Paris?"}, rollout_id=0, seed=3))
            finally:
                await eps.close()

        res = asyncio.run(main())
    assert res.status in ("completed", "truncated"), res.error
    (s,) = res.samples
    kinds = [(sp.node, sp.kind, sp.mask) for sp in s.spans]
    assert kinds[:3] == [("think", "generated", 1), ("search", "observation", 0), ("think", "generated", 1)]
    gen1, obs, gen2 = s.spans[:3]
    between = s.response_ids[gen1.start : gen2.start]
    assert IM_START not in between and IM_END not in between
    assert kit.r.decode(s.response_ids[obs.start : obs.end]).startswith("\n\n<information>Paris")
