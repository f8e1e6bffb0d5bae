"""A user tool for the slime target's fixture graphs (sync: runs in a worker thread)."""

CALLS: list[str] = []


def observe(text: str) -> str:
    CALLS.append(text)
    return f"observed {len(text)} characters"


def observe_then_abort(text: str) -> str:
    """A slow tool during which slime aborts: sets the `aborted` flag of the GenerateState instance in
    the loaded `slime.rollout.sglang_rollout` (slime's, or a test's stand-in module), then returns as
    a tool that was already running would."""
    import sys

    rollout = sys.modules.get("slime.rollout.sglang_rollout")
    state_cls = getattr(rollout, "GenerateState", None)
    state = getattr(state_cls, "_instances", {}).get(state_cls) if state_cls is not None else None
    state.aborted = True
    CALLS.append(text)
    return f"observed {len(text)} characters"


def double_reward(args, sample, **kwargs):
    """A slime rollout sample hook (--rollout-sample-hook-path) that doubles each sample's reward."""
    sample.reward = sample.reward * 2
