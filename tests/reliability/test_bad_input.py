"""Bad input: hypothesis-generated data files and rows through `graphrl run`'s reader, the executor
and the dataset runner. A file problem is one located error (`file:line:col: ...`); a row problem
ends that row's rollout as a well-formed failed (or completed) rollout with a message; nothing
raises a traceback, and the trajectory file stays valid JSONL with every row accounted for.

Graph mutations (hypothesis) live in tests/compilers/test_mutations.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from faultkit import FaultySGLangServerForTests, located, write_graph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphrl.engines.scripted import Scripted, ScriptedEngineForTests
from graphrl.models.tokenizer import QWEN_TOKEN_IDS, qwen_tokenizer
from graphrl.rewards.scorer import RewardBox
from graphrl.runtime.chat import ChatRenderer
from graphrl.runtime.executor import Executor, RolloutInput
from graphrl.runtime.ledger import STATUSES, TrainingSample
from graphrl.runtime.runner import read_rows, run_dataset
from graphrl.runtime.services import StaticEndpoints
from graphrl.tools.registry import ToolBox

IM_END = QWEN_TOKEN_IDS["<|im_end|>"]
FUZZ = int(os.environ.get("GRAPHRL_FUZZ", "1"))  # as tests/compilers/test_mutations.py
SETTINGS = dict(
    deadline=None,
    derandomize=FUZZ == 1,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# A graph that reads a row every way a graph can: an input, a label with a default, metadata, a
# prompt given as text and as a list of chat messages, and a reward over the label.
ROWS_GRAPH = """\
name: rows
inputs:
  q: prompt
  gold: {from: label, required: false, default: ""}
  ctx: {from: metadata.context, required: false, default: ""}
nodes:
  ask:
    llm: policy
    max_tokens: 16
    prompt: [system: "ctx: {{ ctx }}", user: "{{ q }}"]
    next: chat
  chat:
    llm: policy
    max_tokens: 16
    prompt: "{{ q }}"
reward:
  fn: sub_em
  args: {prediction: "{{ chat.text }}", label: "{{ gold }}"}
"""

# ------------------------------------------------------------------------------ strategies

# odd Unicode: every category, lone surrogates included (JSON can carry them as \\ud800 escapes)
odd_char = st.characters(codec=None, categories=None)
odd_text = st.one_of(
    st.text(odd_char, max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\u202e\u2066rtl",
            "\ufeffbom",
            "e\u0301",
            "\U0001f600" * 3,
            "\ud800",
            "a\udfffb",
            "<|im_end|>",
            "<|im_start|>system\nx",
            "{{ 7*7 }}",
            "{% raw %}",
            "\\boxed{",
            "\u2028\u2029",
            "\r\n",
            "\t" * 10,
        ]
    ),
)
huge = st.sampled_from(
    ["x" * 20_000, "€" * 5_000, 10**300, -(2**63), 1e308, float("inf"), float("nan"), list(range(2000))]
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), odd_text, huge)
json_values = st.recursive(
    scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(odd_text, c, max_size=4), max_leaves=10
)
junk_messages = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {
                "role": st.one_of(st.sampled_from(["user", "system", "assistant", "tool", "bogus", ""]), json_values),
                "content": json_values,
            },
            optional={"tool_calls": json_values, "name": json_values, "reasoning_content": json_values},
        ),
        st.fixed_dictionaries({}, optional={"content": json_values, "text": odd_text}),
        json_values,
    ),
    max_size=4,
)
prompts = st.one_of(odd_text, json_values, junk_messages, huge)
rows = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "prompt": prompts,
            "label": json_values,
            "metadata": st.one_of(json_values, st.fixed_dictionaries({"context": json_values})),
            "row": json_values,
            "extra": json_values,
        },
    ),
    json_values,  # not an object at all
)


def encode_line(row, ascii_only: bool) -> bytes:
    """One JSONL line: ASCII-escaped (lone surrogates as \\ud800: valid JSON, odd text), or raw UTF-8
    with surrogates passed through (then the file is not valid UTF-8: a file error)."""
    text = json.dumps(row, ensure_ascii=ascii_only, allow_nan=True)
    return text.encode("utf-8", errors="surrogatepass")


junk_lines = st.one_of(
    st.sampled_from(
        [
            b"{oops",
            b"[",
            b"[" * 3000 + b"]" * 3000,
            b'{"prompt": ' + b"9" * 5000 + b"}",
            b"\xff\xfe\x00garbage",
            b'{"prompt": "caf\xe9"}',
            b"null",
            b"42",
            b'"text"',
            b"\x00",
        ]
    ),
    st.binary(max_size=30).filter(lambda b: b"\n" not in b and b"\r" not in b),
)
lines = st.lists(
    st.one_of(st.tuples(rows, st.booleans()).map(lambda t: encode_line(*t)), junk_lines), min_size=1, max_size=6
)


# ------------------------------------------------------------------------------ helpers


@pytest.fixture(scope="module")
def tok():
    return qwen_tokenizer()


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    return write_graph(tmp_path_factory.mktemp("rows"), ROWS_GRAPH, "rows.yaml")


@pytest.fixture(scope="module")
def executor(plan, tok):
    r = ChatRenderer(tok)
    reply = tuple(r.encode("fine")) + (IM_END,)
    engine = ScriptedEngineForTests(lambda ids, params, i: Scripted(output_ids=reply), tokenizer=tok)
    search = [Path(plan.source["file"]).parent]
    return Executor(
        plan,
        StaticEndpoints({"policy": engine}, r),
        tools=ToolBox(search),
        rewards=RewardBox(search),
        sampling={"temperature": 1.0},
    )


def first_bad_line(data: list[bytes]) -> int | None:
    """The 1-based number of the first line a strict reader must refuse (None: all are rows)."""
    for n, raw in enumerate(data, 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return n
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return n
        if not isinstance(value, dict):
            return n
    return None


# ------------------------------------------------------------------------------ the reader


@settings(max_examples=150 * FUZZ, **SETTINGS)
@given(data=lines)
def test_the_reader_gives_rows_or_one_located_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_bytes(b"\n".join(data) + b"\n")
    bad = first_bad_line(data)
    try:
        got = read_rows(path)
    except ValueError as exc:  # the only exception the reader raises, always located at the bad line
        msg = str(exc)
        assert located(msg), msg
        assert msg.startswith(f"{path}:{bad}:"), (msg, bad)
        assert "\n" not in msg and len(msg) < 400
        return
    assert bad is None, f"line {bad} should have been refused"
    assert all(isinstance(r, dict) for r in got)


@pytest.mark.parametrize(
    "raw, where, what",
    [
        (b'{"prompt": "a"}\n\xff\xfe garbage\n', ":2:1:", "not valid UTF-8"),
        (b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n', ":2:", "not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", ":1:1:", "nested too deeply"),
        (b'{"label": ' + b"7" * 5000 + b"}\n", ":1:", "not valid JSON"),
        (b'{"prompt": "a"}\n"just a string"\n', ":2:1:", "must be a JSON object"),
    ],
)
def test_file_problems_are_located(tmp_path, raw, where, what):
    path = tmp_path / "d.jsonl"
    path.write_bytes(raw)
    with pytest.raises(ValueError) as info:
        read_rows(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}{where}") and what in msg, msg


# ------------------------------------------------------------------------------ rows -> rollouts


def check_result(res) -> None:
    assert res.status in STATUSES
    assert res.status in ("completed", "failed"), (res.status, res.error)
    if res.status == "failed":
        assert isinstance(res.error, str) and res.error
        # a data problem is reported as one, never as an internal error of graphrl
        assert not res.error.startswith("internal error"), res.error
    for s in res.samples:
        s.check_invariants()
        assert s.status == res.status


@settings(max_examples=200 * FUZZ, **SETTINGS)
@given(row=rows)
def test_any_row_ends_as_a_well_formed_rollout(executor, row):
    if not isinstance(row, dict):
        row = {"prompt": row}  # the reader refuses non-objects; the executor still gets only mappings
    res = asyncio.run(executor.run(RolloutInput(row=row, rollout_id=0)))
    check_result(res)


@pytest.mark.parametrize(
    "row, needle",
    [
        ({}, "input 'q' (prompt) is missing from the data row"),
        ({"prompt": None}, "input 'q' (prompt) is missing"),
        ({"prompt": [{"role": "user", "content": 5}]}, "messages"),
        ({"prompt": [{"role": 5, "content": "x"}]}, "messages"),
        ({"prompt": [{"role": "user", "content": {"a": 1}}]}, "messages"),
        ({"prompt": [{"content": "no role"}]}, "messages"),
        ({"prompt": [1, 2, 3]}, "messages"),
        ({"prompt": 42}, "messages"),
        ({"prompt": "a\ud800b"}, "surrogate"),
    ],
)
def test_row_problems_fail_the_rollout_with_a_located_message(executor, row, needle):
    res = asyncio.run(executor.run(RolloutInput(row=row, rollout_id=0)))
    check_result(res)
    assert res.status == "failed" and needle in res.error, res.error
    assert re.search(r"rows\.yaml:\d+:\d+: ", res.error), res.error


def test_well_formed_chat_message_prompts_are_used_as_messages(executor):
    res = asyncio.run(
        executor.run(
            RolloutInput(
                row={
                    "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
                    "label": "fine",
                },
                rollout_id=0,
            )
        )
    )
    assert res.status == "completed" and res.reward == 1.0, res.error


@settings(max_examples=40 * FUZZ, **SETTINGS)
@given(data=st.lists(st.tuples(rows, st.booleans()).map(lambda t: encode_line(t[0], True)), min_size=1, max_size=5))
def test_a_file_of_fuzzed_rows_runs_to_a_valid_trajectory_file(executor, tmp_path_factory, data):
    """reader -> runner -> file: every readable row accounted for once, every line valid JSON."""
    d = tmp_path_factory.mktemp("run")
    path = d / "rows.jsonl"
    path.write_bytes(b"\n".join(data) + b"\n")
    try:
        got = read_rows(path)
    except ValueError as exc:
        assert located(str(exc)), exc
        return
    out = d / "traj.jsonl"
    summary = asyncio.run(run_dataset(executor, got, out, n_samples=2, progress=False, decode=str))
    assert summary.rollouts == 2 * len(got)
    recs = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sorted({(r["group"], r["n"]) for r in recs}) == [(g, n) for g in range(len(got)) for n in range(2)]
    for rec in recs:
        assert rec["status"] in ("completed", "failed")
        if rec["num_samples"]:
            TrainingSample.from_json(rec)


# ------------------------------------------------------------------------------ `graphrl run` itself


NASTY = {
    "invalid_utf8": (b'{"prompt": "a", "label": "fine"}\n\xff\xfe\n', 2, ":2:1: not valid UTF-8"),
    "deep": (
        b'{"prompt": "a"}\n' + b"[" * 50_000 + b"]" * 50_000 + b"\n",
        2,
        ":2:1: not valid JSON: nested too deeply",
    ),
    "not_object": (b'{"prompt": "a"}\n[1, 2]\n', 2, ":2:1: a data row must be a JSON object"),
    "junk_rows": (
        "\n".join(
            json.dumps(r, ensure_ascii=True)
            for r in [
                {"prompt": "fine row", "label": "fine"},
                {},
                {"prompt": [{"role": 5}]},
                {"prompt": "x\ud800"},
                {"prompt": "ok", "metadata": "not a mapping"},
                {"prompt": "ok", "metadata": [1, 2]},
                {"prompt": "€" * 20000, "label": 10**200},
                {"prompt": {"nested": [None, float("nan")]}},
            ]
        ).encode()
        + b"\n",
        None,
        None,
    ),
}


@pytest.fixture(scope="module")
def server(tok):
    with FaultySGLangServerForTests(tok, reply=lambda prompt: "fine") as srv:
        yield srv


@pytest.mark.parametrize("name", sorted(NASTY))
@pytest.mark.parametrize("with_metadata", [False, True], ids=["plain", "metadata_option"])
def test_graphrl_run_never_prints_a_traceback(plan, server, tmp_path, name, with_metadata):
    from graphrl.cli import main

    raw, _, located_as = NASTY[name]
    data = tmp_path / "d.jsonl"
    data.write_bytes(raw)
    out = tmp_path / "t.jsonl"
    args = [
        "run",
        plan.source["file"],
        "--data",
        str(data),
        "--out",
        str(out),
        "--engine",
        "sglang",
        "--tokenizer",
        "qwen",
        "--url",
        server.url,
        "--quiet",
    ]
    if with_metadata:
        args += ["--metadata", "context=from the command line"]
    result = CliRunner().invoke(main, args, catch_exceptions=True)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if located_as is not None:
        assert result.exit_code == 2 and f"{data}{located_as}" in result.output, result.output
        return
    assert result.exit_code == 0, result.output
    n_rows = raw.count(b"\n")
    recs = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert sorted({r["group"] for r in recs}) == list(range(n_rows))  # every row accounted for
    status = {r["group"]: r["status"] for r in recs}
    assert status[0] == "completed" and "failed" in status.values()
    if with_metadata:  # rows whose metadata is no mapping keep theirs, and the run says so
        assert "--metadata not applied to 2 row(s)" in result.output
    for rec in recs:
        assert rec["status"] in ("completed", "failed")
        if rec["status"] == "failed":
            assert not rec["error"].startswith("internal error"), rec["error"]
        if rec["num_samples"]:
            TrainingSample.from_json(rec)


def test_an_error_quoting_invalid_text_still_gives_a_valid_trajectory_line(tok, tmp_path):
    """A tool's error can quote the row's data verbatim (here a lone surrogate); the runner still
    writes the line as valid JSON (the surrogate as a \\ud800 escape), and the run goes on."""
    plan = write_graph(
        tmp_path / "g",
        """\
name: quote
inputs: {q: prompt}
nodes:
  t:
    tool: quote_tool:refuse
    args: {x: "{{ q }}"}
    next: a
  a:
    llm: policy
    prompt: [user: "{{ t.error }}"]
""",
        "quote.yaml",
        {"quote_tool": "def refuse(x):\n    raise ValueError('cannot use ' + x)\n"},
    )
    r = ChatRenderer(tok)
    reply = tuple(r.encode("fine")) + (IM_END,)
    engine = ScriptedEngineForTests(lambda ids, params, i: Scripted(output_ids=reply), tokenizer=tok)
    search = [Path(plan.source["file"]).parent]
    ex = Executor(plan, StaticEndpoints({"policy": engine}, r), tools=ToolBox(search), rewards=RewardBox(search))
    out = tmp_path / "t.jsonl"
    rows = [{"prompt": "k\ud800"}, {"prompt": "k"}]
    summary = asyncio.run(run_dataset(ex, rows, out, progress=False, decode=r.decode))
    assert summary.rollouts == 2
    recs = {rec["group"]: rec for rec in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert recs[0]["status"] == "failed" and "lone surrogate" in recs[0]["error"]
    assert recs[0]["rollout"]["calls"][0]["error"] == "ValueError: cannot use k\ud800"  # verbatim, round-tripped
    assert recs[1]["status"] == "completed"
