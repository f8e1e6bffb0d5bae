"""Rows of docs/slime.md's flags table inside slime's REAL code (skipped without slime, as
test_slime_real.py), against `graphrl serve --model tiny`:

- --rollout-external-engine-addrs: slime's own `start_external_rollout_servers` sets the args (its
  router, `sglang_model_routers = {"default": ...}`); Ray and the router are replaced (the router by
  the tiny server itself, which speaks the same /generate), everything slime writes on args is its own;
- --rollout-sample-filter-path / --rollout-all-samples-process-path: slime's `generate_rollout_async`
  over one-sample and fan-out groups (its end-of-step `abort`, which asks a real router for its
  workers, is replaced by a no-op: every request has finished by then), then
  `_convert_samples_to_train_data` with graphrl's post-process.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from unittest import mock

import pytest
from slime_testkit import import_stubbed
from test_slime_real import (
    Sample,
    _always_right_fanout,
    _args_for,
    _rollout_manager_class,
    fresh_state,
    load_function,
    sglang_rollout,
)

__all__ = ["fresh_state"]  # the fixture, used by name


def test_external_engines_args_set_by_slime_reach_generate(
    slime_kit, tiny_server, tiny_checkpoint, fresh_state, monkeypatch
):
    external = import_stubbed("slime.backends.sglang_utils.external")
    import_stubbed("slime.backends.sglang_utils.sglang_engine")
    out = slime_kit.compile("single")
    monkeypatch.syspath_prepend(str(out))
    args = _args_for(out, tiny_server, tiny_checkpoint, custom_reward_post_process_path=None)
    host, port = tiny_server.removeprefix("http://").split(":")
    args.sglang_router_ip = args.sglang_router_port = None  # slime's router is not started yet
    args.rollout_external_engine_addrs = ["10.1.1.1:30000"]
    args.rollout_external = True
    info = external.ExternalEngineInfo(
        url="http://10.1.1.1:30000", host="10.1.1.1", port=30000, worker_type="regular", num_gpus=1
    )
    args.rollout_external_engine_infos = [info.to_dict()]  # what apply_external_engine_info_to_args stores
    monkeypatch.setitem(sys.modules, "ray", mock.MagicMock(name="ray"))  # no Ray actors here
    servers, _handles = external.start_external_rollout_servers(args, start_router=lambda a, **kw: (host, int(port)))
    assert (args.sglang_router_ip, args.sglang_router_port) == (host, int(port))
    assert args.sglang_model_routers == {"default": (host, int(port))} and list(servers) == ["default"]
    state = sglang_rollout.GenerateState(args)
    params = dict(state.sampling_params, max_new_tokens=8)
    got = asyncio.run(sglang_rollout.generate_and_rm(args, Sample(prompt="Say hi.", label="hi", index=0), params))
    assert got.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED) and got.response_length >= 1


def _filter_args(out, tiny_server, tiny_checkpoint, **kw):
    args = _args_for(
        out,
        tiny_server,
        tiny_checkpoint,
        rollout_global_dataset=True,
        over_sampling_batch_size=2,
        rollout_batch_size=2,
        n_samples_per_prompt=2,
        rollout_all_samples_process_path="slime_tools.see_all_samples",
        custom_convert_samples_to_train_data_path=None,
        **kw,
    )
    return args


def _run_step(args, monkeypatch):
    """slime's generate_rollout_async for one step over two prompts of two samples each."""

    async def no_router_abort(args, rollout_id):  # slime asks its router for /workers here
        sglang_rollout.GenerateState(args).aborted = True
        return []

    monkeypatch.setattr(sglang_rollout, "abort", no_router_abort)
    batches = iter(
        [
            [[Sample(prompt=f"Name river {g}.", label="Nile", index=2 * g + i, group_index=g) for i in range(2)]]
            for g in range(8)
        ]
    )
    output, aborted = asyncio.run(sglang_rollout.generate_rollout_async(args, 0, lambda n: next(batches)))
    return output.samples


def _train_data(args, groups):
    manager_cls = _rollout_manager_class()
    manager = manager_cls.__new__(manager_cls)  # only what _convert_samples_to_train_data reads
    manager.args = args
    manager.custom_convert_samples_to_train_data_func = None
    path = args.custom_reward_post_process_path
    manager.custom_reward_post_process_func = load_function(path) if path else None
    flat = list(itertools.chain.from_iterable(groups))
    flat = list(itertools.chain.from_iterable(s if isinstance(s, list) else [s] for s in flat))
    return flat, manager_cls._convert_samples_to_train_data(manager, flat)


def test_sample_filter_on_one_sample_groups(slime_kit, tiny_server, tiny_checkpoint, fresh_state, monkeypatch):
    import slime_tools

    out = slime_kit.compile("single")
    monkeypatch.syspath_prepend(str(out))
    args = _filter_args(
        out,
        tiny_server,
        tiny_checkpoint,
        custom_reward_post_process_path=None,
        rollout_sample_filter_path="slime_tools.remove_odd_samples_flat",
    )
    groups = _run_step(args, monkeypatch)
    assert len(groups) == 2 and all(isinstance(s, Sample) for g in groups for s in g)  # slime's documented shape
    assert slime_tools.SEEN["all"] == groups
    flat, train = _train_data(args, groups)
    for s, mask in zip(flat, train["loss_masks"]):
        assert s.remove_sample == bool(s.index % 2)
        assert (set(mask) == {0}) == s.remove_sample  # slime zeroes a removed sample's loss mask


def test_sample_filter_on_fanout_groups_sees_lists_of_rollouts(
    slime_kit, tiny_server, tiny_checkpoint, fresh_state, monkeypatch
):
    import slime_tools

    out = _always_right_fanout(slime_kit)
    monkeypatch.syspath_prepend(str(out))
    host, port = tiny_server.removeprefix("http://").split(":")
    routers = {"helper": (host, int(port)), "critic": (host, int(port))}
    args = _filter_args(
        out,
        tiny_server,
        tiny_checkpoint,
        sglang_model_routers=routers,
        rollout_sample_filter_path="slime_tools.remove_odd_rollouts",
    )
    groups = _run_step(args, monkeypatch)
    filtered = slime_tools.SEEN["filter"]
    # a fan-out group: n_samples_per_prompt entries, each a rollout's list of samples
    assert filtered is groups and all(isinstance(r, list) and r for g in groups for r in g)
    assert all(isinstance(s, Sample) for g in groups for r in g for s in r)
    flat, train = _train_data(args, groups)
    for s, mask in zip(flat, train["loss_masks"]):
        assert s.remove_sample == bool(s.rollout_id % 2) and (set(mask) == {0}) == s.remove_sample
    # the normalisation still counts every rollout (slime's rule for remove_sample): each prompt group's
    # rollouts all score 1.0, so every normalised reward is 0, removed or not
    assert train["rewards"] == pytest.approx([0.0] * len(flat))

    # a filter written for slime's documented shape (a group = list of Samples) fails on fan-out groups:
    # `sample.index` of a list is the list's index method
    flat_filter = load_function("slime_tools.remove_odd_samples_flat")
    with pytest.raises(TypeError, match="builtin_function_or_method"):
        flat_filter(args, groups)
