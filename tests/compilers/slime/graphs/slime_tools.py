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


# --rollout-sample-filter-path / --rollout-all-samples-process-path hooks (slime loads them by dotted path)
SEEN: dict = {}


def remove_odd_rollouts(args, data):
    """A sample filter that works for both shapes: a group's entries are Samples, or, for a fan-out
    graph, lists of Samples (one list per rollout). Marks every sample of odd-index rollouts removed."""
    SEEN["filter"] = data
    for group in data:
        for rollout in group:
            for sample in rollout if isinstance(rollout, list) else [rollout]:
                if sample.index % 2:
                    sample.remove_sample = True


def remove_odd_samples_flat(args, data):
    """A sample filter written as slime documents it (each group a list of Samples)."""
    for group in data:
        for sample in group:
            sample.remove_sample = bool(sample.index % 2)


def see_all_samples(args, all_samples, data_source):
    SEEN["all"] = all_samples
