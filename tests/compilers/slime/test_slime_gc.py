"""GRAPHRL_GC_THRESHOLD: the rollout process's garbage-collector thresholds, opt-in, read once where
the slime target is built (graphrl/compilers/slime/config.py, adapter.py)."""

from __future__ import annotations

import pytest

from graphrl.compilers.slime import adapter
from graphrl.compilers.slime.adapter import SlimeTarget
from graphrl.compilers.slime.config import SlimeConfigError, gc_threshold_from_env


@pytest.mark.parametrize(
    ("value", "want"),
    [("", None), ("  ", None), ("50000,20,100", (50000, 20, 100)), (" 700 , 10 , 0 ", (700, 10, 0))],
)
def test_the_setting_is_read_as_three_whole_numbers_or_left_alone(value, want):
    assert gc_threshold_from_env({"GRAPHRL_GC_THRESHOLD": value} if value else {}) == want


@pytest.mark.parametrize(
    "value", ["50000,20", "1,2,3,4", "a,b,c", "0,10,10", "-1,10,10", "5e4,20,100", "50000;20;100", "5²,20,100"]
)
def test_a_bad_setting_is_refused_with_the_fix(value):
    with pytest.raises(SlimeConfigError) as err:
        gc_threshold_from_env({"GRAPHRL_GC_THRESHOLD": value})
    message = str(err.value)
    assert "GRAPHRL_GC_THRESHOLD" in message and repr(value) in message and "e.g. 50000,20,100" in message


def test_the_target_sets_the_thresholds_only_when_asked(monkeypatch, tmp_path):
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(adapter.gc, "set_threshold", lambda *t: calls.append(t))
    monkeypatch.delenv("GRAPHRL_GC_THRESHOLD", raising=False)
    SlimeTarget(tmp_path / "plan.json")
    assert calls == []
    monkeypatch.setenv("GRAPHRL_GC_THRESHOLD", "50000,20,100")
    SlimeTarget(tmp_path / "plan.json")
    assert calls == [(50000, 20, 100)]


def test_a_bad_setting_stops_the_target_before_any_rollout(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHRL_GC_THRESHOLD", "lots")
    with pytest.raises(SlimeConfigError, match="GRAPHRL_GC_THRESHOLD='lots'"):
        SlimeTarget(tmp_path / "plan.json")
