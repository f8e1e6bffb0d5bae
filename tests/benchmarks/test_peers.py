"""`python -m benchmarks.peers`: graphrl's Search-R1 / ReTool graphs next to slime's own examples.

A tiny run (a subprocess: the documented command). graphrl's rows always run; slime's only when a
THUDM/slime checkout is named by GRAPHRL_SLIME_SRC (CI has none: the run must then say that it
skipped them). Checked: every rollout completed, graphrl trains exactly the sampled tokens with the
engine's log-probs and conditions every call on the sample's own tokens; with slime, its examples
made the same LLM calls (same scripted behaviour) and trained the sampled tokens too. Timings are
never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLIME = os.environ.get("GRAPHRL_SLIME_SRC")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, str]:
    pytest.importorskip("transformers")
    pytest.importorskip("bm25s")
    out = tmp_path_factory.mktemp("peers") / "peers.json"
    build = tmp_path_factory.mktemp("peers-build")
    cmd = [sys.executable, "-m", "benchmarks.peers", "--quick", "--concurrency", "2", "--rollouts", "4"]
    cmd += ["--json", str(out), "--build-dir", str(build)] + (["--slime", SLIME] if SLIME else [])
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Unclosed client session" not in done.stderr, done.stderr[-2000:]
    return json.loads(out.read_text()), done.stdout


@pytest.mark.slow
def test_graphrl_rows_are_exact(run):
    data, _ = run
    graphrl = [c for c in data["cells"] if c["system"] == "graphrl"]
    assert {c["workflow"] for c in graphrl} == {"search_r1", "retool"}
    for c in graphrl:
        assert c["rollouts"] == 4 and c["statuses"] == {"completed": 4}, c["statuses"]
        assert c["trained_tokens"] > 0
        assert (c["mismatch_tokens"], c["logprob_mismatches"], c["malformed"]) == (0, 0, 0)
        assert c["context_calls"] == c["policy_calls"] > 4  # some rollout searched / ran code
        assert c["context_mismatches"] == 0


@pytest.mark.slow
def test_slime_rows_or_a_reason(run):
    data, stdout = run
    slime = [c for c in data["cells"] if c["system"] == "slime"]
    if not SLIME:
        assert not slime
        assert "slime's examples skipped: no slime checkout given" in stdout
        return
    by = {(c["workflow"], c["system"]): c for c in data["cells"]}
    for wf in ("search_r1", "retool"):
        g, s = by[(wf, "graphrl")], by[(wf, "slime")]
        assert s["policy_calls"] == g["policy_calls"]  # the same scripted turns, read off the prompt
        assert s["statuses"] == {"completed": 4}
        assert s["trained_tokens"] > 0 and (s["mismatch_tokens"], s["malformed"]) == (0, 0)
    assert "## search_r1" in stdout and "graphrl / slime:" in stdout
