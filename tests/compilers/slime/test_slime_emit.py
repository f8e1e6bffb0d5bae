"""What `graphrl compile` writes for slime: golden launch.sh / README.md / slime_args.yaml /
sglang_config.yaml for every bundled graph (and a fixture graph whose frozen model slime serves).

Paths are normalised (<OUT> the output dir, <REPO> the repository, <SHA> the plan hash). After an
intended change, regenerate with

    GRAPHRL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compilers/slime/test_slime_emit.py

and review the diff of tests/compilers/slime/golden/ like any other change.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from slime_testkit import GRAPHS, REPO

from graphrl.compilers.lower import plan_from_path
from graphrl.compilers.slime.adapter import SlimeTarget
from graphrl.compilers.slime.emit import (
    DEFAULT_TRAIN_ARGS,
    module_name,
    rollout_gpus,
    slime_flags,
    write_slime_target,
)
from graphrl.plan import load_plan

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GRAPHRL_UPDATE_GOLDEN") == "1"
CASES = {p.stem: p for p in sorted((REPO / "graphs").glob("*.yaml"))} | {"fanout": GRAPHS / "fanout.yaml"}
FILES = ("launch.sh", "README.md", "slime_args.yaml", "sglang_config.yaml")


def _compile(graph: Path, out: Path):
    plan, diags = plan_from_path(graph.relative_to(REPO))
    assert plan is not None, "\n".join(str(d) for d in diags)
    written = write_slime_target(plan, out)
    return plan, written


def _normalise(text: str, out: Path) -> str:
    text = text.replace(str(out.resolve()), "<OUT>").replace(str(out), "<OUT>").replace(str(REPO), "<REPO>")
    return re.sub(r"sha256 [0-9a-f]{12}", "sha256 <SHA>", text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_files(name, tmp_path):
    out = tmp_path / "out"
    plan, written = _compile(CASES[name], out)
    names = {p.name for p in written}
    assert names >= {"plan.json", f"{module_name(plan)}.py", "slime_args.yaml", "launch.sh", "README.md"}
    for f in FILES:
        path, golden = out / f, GOLDEN / name / f
        if not path.exists():
            assert not golden.exists(), f"{name}: {f} is no longer written"
            continue
        text = _normalise(path.read_text(encoding="utf-8"), out)
        if UPDATE:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(text, encoding="utf-8")
        assert golden.exists(), f"no golden {golden}: run with GRAPHRL_UPDATE_GOLDEN=1"
        assert text == golden.read_text(encoding="utf-8"), f"{name}/{f} changed; see the module docstring"


@pytest.mark.parametrize("name", sorted(CASES))
def test_launch_script_is_valid_bash_with_every_flag(name, tmp_path):
    out = tmp_path / "out"
    plan, _ = _compile(CASES[name], out)
    script = (out / "launch.sh").read_text()
    assert subprocess.run(["bash", "-n", str(out / "launch.sh")]).returncode == 0
    assert os.access(out / "launch.sh", os.X_OK)
    words = shlex.split(script.replace("\\\n", " "), comments=True)
    for flag in slime_flags(plan, out):
        assert flag in words, flag
    start = words.index(DEFAULT_TRAIN_ARGS[0])
    assert tuple(words[start : start + len(DEFAULT_TRAIN_ARGS)]) == DEFAULT_TRAIN_ARGS  # the recipe, in order
    mod = module_name(plan)
    assert f"{mod}.generate" in words
    if plan.training.fanout:
        assert f"{mod}.post_process_rewards" in words and "--use-dynamic-batch-size" in words
        assert "--group-rm" not in words and "--partial-rollout" not in words
    assert words[-1] == "$@"  # the user's extra flags come last and win


def test_slime_args_yaml_is_what_custom_config_path_applies(tmp_path):
    out = tmp_path / "out"
    plan, _ = _compile(CASES["memagent"], out)
    data = yaml.safe_load((out / "slime_args.yaml").read_text())
    assert set(data) == {"graphrl_plan_path", "graphrl_source_dir", "graphrl_request_timeout_s"}

    class Args:  # slime/utils/arguments.py: every key of the YAML becomes an attribute of args
        pass

    args = Args()
    for k, v in data.items():
        setattr(args, k, v)
    assert Path(args.graphrl_plan_path) == (out / "plan.json").resolve()
    assert Path(args.graphrl_source_dir) == (REPO / "graphs")
    target = SlimeTarget(tmp_path / "elsewhere.json")  # the args' path wins over the default
    assert target.plan(args) == load_plan(out / "plan.json")


def test_sglang_config_for_served_frozen_models(tmp_path):
    out = tmp_path / "out"
    plan, _ = _compile(CASES["fanout"], out)
    cfg = yaml.safe_load((out / "sglang_config.yaml").read_text())
    models = cfg["sglang"]
    assert [m["name"] for m in models] == ["policy", "helper"]  # the policy first; critic has a url
    assert [m["update_weights"] for m in models] == [True, False]
    assert "model_path" not in models[0] and models[1]["model_path"] == "/models/helper"
    total = sum(g["num_gpus"] for m in models for g in m["server_groups"])
    flags = slime_flags(plan, out)
    assert flags[flags.index("--rollout-num-gpus") + 1] == str(total) == str(rollout_gpus(plan))
    assert flags[flags.index("--sglang-config") + 1] == str((out / "sglang_config.yaml").resolve())
    # no served frozen model: no config, and a stale one from an earlier compile is removed
    _compile(CASES["hello"], out)
    assert not (out / "sglang_config.yaml").exists()


def test_sglang_config_loads_with_slimes_own_class(tmp_path):
    try:
        from slime.backends.sglang_utils.sglang_config import SglangConfig
    except Exception as exc:
        pytest.skip(f"slime is not importable ({type(exc).__name__}: {exc}); put a slime checkout on PYTHONPATH")
    out = tmp_path / "out"
    plan, _ = _compile(CASES["fanout"], out)
    config = SglangConfig.from_yaml(str(out / "sglang_config.yaml"))
    args = type("A", (), {"rollout_num_gpus_per_engine": 1, "hf_checkpoint": "/ckpt/policy"})()
    for m in config.models:
        m.resolve(args)
    assert [m.name for m in config.models] == ["policy", "helper"]
    assert [m.update_weights for m in config.models] == [True, False]
    assert config.total_num_gpus == rollout_gpus(plan)  # slime asserts == --rollout-num-gpus
    assert config.models[0].server_groups[0].overrides["model_path"] == "/ckpt/policy"
    assert config.models[1].server_groups[0].overrides["model_path"] == "/models/helper"
