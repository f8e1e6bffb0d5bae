"""graphs/tau_retail.yaml with canned replies for the trained agent and the frozen customer simulator,
and the real environment (graphs/retail_env.py): every branch (customer speaks, tool call, reply to
the customer, ###STOP###, turn limit), tool errors as observations, the environment's reward, one
environment per rollout, and the agent's token layout (its messages trained, the rest masked)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from graphrl.compilers.lower import plan_from_path
from graphrl.runtime.executor import RolloutInput

REPO = Path(__file__).resolve().parents[2]
ROWS = [json.loads(line) for line in (REPO / "data" / "tau_retail.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def plan():
    p, diags = plan_from_path(REPO / "graphs" / "tau_retail.yaml")
    assert p is not None, diags
    yield p
    sys.modules.pop("retail_env", None)


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _run(kit, plan, agent, customer, row=0):
    engines = {"policy": kit.engine(agent), "user_sim": kit.engine(customer)}
    res = kit.run(kit.executor(plan, engines), ROWS[row])
    return res, engines


def test_the_agent_looks_up_cancels_and_the_customer_stops(kit, plan):
    res, engines = _run(
        kit,
        plan,
        [
            call("get_order_details", order_id="#W1001"),
            "I see order #W1001 (a kettle) is pending. Shall I cancel it because it was ordered by mistake?",
            call("cancel_pending_order", order_id="#W1001", reason="ordered by mistake"),
            "Done: order #W1001 is cancelled.",
        ],
        ["I ordered a kettle by mistake, order #W1001. Please cancel it.", "Yes please.", "Thanks! ###STOP###"],
    )
    assert res.status == "completed", res.error
    nodes = [n for n, _ in res.path]
    assert nodes == [
        "customer",
        "agent",
        "act",
        "agent",
        "reply",
        "customer",
        "agent",
        "act",
        "agent",
        "reply",
        "customer",
    ]
    assert res.reward == 1.0
    (s,) = res.samples  # the agent's one multi-turn sample; the customer is frozen: no sample
    kinds = [(sp.node, sp.mask) for sp in s.spans]
    assert ("agent", 1) in kinds and ("act", 0) in kinds and all(m == 0 for n, m in kinds if n != "agent")
    text = kit.r.decode(s.prompt_ids + s.response_ids)
    assert '"name": "get_order_details"' in text.split("<|im_start|>system")[1]  # tool schemas from reset()
    assert '"status": "cancelled"' in text  # the env's answer to the cancel call, masked
    # the customer saw the agent's messages as user turns, in order
    cust_prompt = kit.r.decode(engines["user_sim"].requests[-1].input_ids)
    assert "Shall I cancel it" in cust_prompt and "Done: order #W1001 is cancelled." in cust_prompt


def test_a_wrong_change_scores_zero(kit, plan):
    res, _ = _run(
        kit,
        plan,
        [call("return_delivered_order", order_id="#W1002"), "Your mug return has started."],
        ["Cancel my kettle order #W1001 please.", "###STOP###"],
    )
    assert res.status == "completed" and res.reward == 0.0


def test_tool_errors_are_observations(kit, plan):
    res, _ = _run(
        kit,
        plan,
        [
            call("cancel_pending_order", order_id="#W1002", reason="no longer needed"),
            call("refund_everything"),
            "Sorry.",
        ],
        ["Cancel #W1002.", "###STOP###"],
    )
    errors = [c.error for c in res.calls if c.node == "act"]
    assert errors == [None, None]  # env_step answered; the env reported the problem in its text
    (s,) = res.samples
    text = kit.r.decode(s.response_ids)
    assert "only pending orders can be cancelled" in text and "unknown tool refund_everything" in text
    assert res.reward == 0.0


def test_the_conversation_ends_after_max_turns(kit, plan):
    res, engines = _run(kit, plan, ["How else can I help?"] * 20, ["Hmm."] * 20)
    assert len(engines["policy"].requests) == plan.constants["max_turns"] == 6
    assert res.status == "completed" and res.reward == 0.0


def test_each_rollout_has_its_own_shop(kit, plan):
    cancel = call("cancel_pending_order", order_id="#W1001", reason="ordered by mistake")
    engines = {
        "policy": kit.engine(lambda prompt, i: "Done." if "<tool_response>" in prompt or "Error" in prompt else cancel),
        "user_sim": kit.engine(lambda prompt, i: "###STOP###" if "Done." in prompt else "Cancel #W1001."),
    }
    ex = kit.executor(plan, engines)

    async def both():
        return await asyncio.gather(*(ex.run(RolloutInput(row=ROWS[0], rollout_id=i)) for i in range(2)))

    results = asyncio.run(both())
    for res in results:  # both cancels succeeded: with one shared database the second would be refused
        text = kit.r.decode(res.samples[0].response_ids)
        assert '"status": "cancelled"' in text and "Error" not in text, text
        assert res.reward == 1.0
