"""On-policy distillation from a graph-declared teacher inside slime's REAL code (skipped without slime,
as test_slime_real.py): slime's generate_and_rm_group calls the compiled generate against
`graphrl serve --model tiny` (policy and teacher), slime's own `Sample` validators and debug round
trip, `_convert_samples_to_train_data` + `tensorize_rollout_data_for_training` carry the teacher's
log-probs to training, and slime's own OPD (`on_policy_distillation.reward_func` + its post-process)
computes the same slice for the same ids.
"""

from __future__ import annotations

import asyncio
import copy
import itertools

import pytest
from slime_testkit import GRAPHS, import_stubbed
from test_slime_real import Sample, _args_for, _rollout_manager_class, fresh_state, sglang_rollout

__all__ = ["fresh_state"]  # the fixture, used by name


def test_teacher_log_probs_reach_slimes_train_data_and_match_slimes_own_opd(
    slime_kit, tiny_server, tiny_checkpoint, fresh_state, monkeypatch
):
    from slime.rollout import on_policy_distillation

    rollout_data_utils = import_stubbed("slime.observability.rollout_data_utils")
    src = slime_kit.tmp / "distill_real.yaml"
    src.write_text((GRAPHS / "distill.yaml").read_text().replace("http://127.0.0.1:39998", tiny_server))
    out = slime_kit.compile(src, out="distill_real")
    monkeypatch.syspath_prepend(str(out))
    args = _args_for(
        out,
        tiny_server,
        tiny_checkpoint,
        use_opd=True,
        opd_type="sglang",
        custom_reward_post_process_path=None,
        custom_convert_samples_to_train_data_path=None,
        n_samples_per_prompt=2,
        rm_url=tiny_server + "/generate",  # only for slime's own OPD reward function, called by hand below
    )
    state = sglang_rollout.GenerateState(args)
    params = dict(state.sampling_params, max_new_tokens=8)
    group = [Sample(prompt="What is 2+2?", label="4", index=i, group_index=0) for i in range(2)]
    got = asyncio.run(sglang_rollout.generate_and_rm_group(args, group, sampling_params=params))
    flat = list(itertools.chain.from_iterable(s if isinstance(s, list) else [s] for s in got))
    for s in flat:
        s._validate_response_metadata_lengths()
        assert len(s.teacher_log_probs) == s.response_length
        assert Sample.from_dict(s.to_dict()).teacher_log_probs == s.teacher_log_probs  # --save-debug-rollout-data
        # slime's own OPD for the same sample: its reward function asks the teacher, its post-process slices
        theirs = copy.deepcopy(s)
        theirs.reward = asyncio.run(on_policy_distillation.reward_func(args, theirs))
        on_policy_distillation.post_process_rewards(args, [theirs])
        assert s.teacher_log_probs == pytest.approx(theirs.teacher_log_probs.tolist(), abs=1e-6)
        assert s.reward is not None and not isinstance(s.reward, dict)  # the graph's reward stays

    manager_cls = _rollout_manager_class()
    manager = manager_cls.__new__(manager_cls)  # only what _convert_samples_to_train_data reads
    manager.args = args
    manager.custom_convert_samples_to_train_data_func = None
    manager.custom_reward_post_process_func = None
    train = manager_cls._convert_samples_to_train_data(manager, flat)
    assert train["teacher_log_probs"] == [s.teacher_log_probs for s in flat]
    rollout_data_utils.tensorize_rollout_data_for_training(train)
    for t, n in zip(train["teacher_log_probs"], train["response_lengths"]):
        assert str(t.dtype) == "torch.float32" and tuple(t.shape) == (n,)  # what slime's OPD loss subtracts
