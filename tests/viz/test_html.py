"""The trajectory HTML file: self-contained, its embedded data matches the trajectory, bounded size."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from synth import write_synthetic
from vizkit import multiturn_graph, real_records, real_run, repo  # noqa: F401 (pytest fixtures)

from graphrl.viz.build import trajectory_output

LARGE_BOUND = 6_000_000  # bytes for 64 samples x 8,192 response tokens (measured ~3.7 MB)
LARGE_SECONDS = 15.0  # measured ~1.2 s with --tokenizer none, ~2.5 s with the Qwen tokenizer, on 2 cores


def embedded(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="graphrl-data">(.*?)</script>', html, re.S)
    assert m, "no embedded data"
    assert "<" not in m.group(1)
    return json.loads(m.group(1))


def assert_self_contained(html: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)
    assert not re.search(r"\b(fetch|XMLHttpRequest|importScripts|WebSocket)\s*\(", html)
    assert "@import" not in html and "url(http" not in html


def test_structure_matches_the_trajectory(real_run, real_records, multiturn_graph):
    html = trajectory_output(real_run, "html", graph=str(multiturn_graph), tokenizer="qwen")
    assert_self_contained(html)
    for section in ("graph-box", "group-table", "waterfall", "strip", "node-table", "heat", "sample-tabs"):
        assert f'id="{section}"' in html
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in html and 'data-node="turn"' in html
    data = embedded(html)
    assert data["meta"]["graph"] == "multiturn" and data["meta"]["notices"] == []
    samples = [r for r in real_records if r.get("tokens")]
    assert len(data["samples"]) == len(samples)
    for s, rec in zip(data["samples"], samples):
        assert s["trained"] == sum(rec["loss_mask"])
        assert s["masked"] == rec["response_length"] - sum(rec["loss_mask"])
        assert len(s["spans"]) == len(rec["spans"])
        assert [data["nodes"][sp[0]] for sp in s["spans"]] == [sp["node"] for sp in rec["spans"]]
    r0 = data["rollouts"][0]
    assert [data["nodes"][ni] for ni, _ in r0["path"]] == [p[0] for p in real_records[0]["rollout"]["path"]]
    assert data["roles"] == {"turn": "trained", "observe": "masked"}


def test_same_input_same_bytes(real_run, multiturn_graph):
    a = trajectory_output(real_run, "html", graph=str(multiturn_graph), tokenizer="none")
    b = trajectory_output(real_run, "html", graph=str(multiturn_graph), tokenizer="none")
    assert a == b


def test_script_breaking_text_is_escaped(tmp_path):
    recs = write_synthetic(tmp_path / "t.jsonl", 1, 1, 40)
    recs[0]["error"] = "</script><script>alert(1)</script>"
    recs[0]["rollout_reward"] = {"score": 1.0, "pred": "<!-- </script>"}
    (tmp_path / "t.jsonl").write_text(json.dumps(recs[0]) + "\n")
    html = trajectory_output(tmp_path / "t.jsonl", "html", tokenizer="none")
    assert html.count("</script>") == 2  # the data block's and the viewer's own
    assert embedded(html)["rollouts"][0]["error"] == recs[0]["error"]


def test_large_run_is_bounded_and_fast(tmp_path, multiturn_graph):
    path = tmp_path / "large.jsonl"
    write_synthetic(path, 8, 8, 8192)
    t0 = time.monotonic()
    html = trajectory_output(path, "html", graph=str(multiturn_graph), tokenizer="none")
    took = time.monotonic() - t0
    size = len(html.encode("utf-8"))
    print(f"64 x 8192 tokens: {size:,} bytes of HTML in {took:.2f} s")
    assert size < LARGE_BOUND and took < LARGE_SECONDS
    data = embedded(html)
    assert len(data["samples"]) == 64 and data["meta"]["omitted"] == 0
    (tmp_path / "large.html").write_text(html)


def test_cap_leaves_a_notice_and_spans(tmp_path):
    path = tmp_path / "t.jsonl"
    write_synthetic(path, 2, 4, 2000)
    html = trajectory_output(path, "html", tokenizer="none", max_tokens=5000)
    data = embedded(html)
    kept = [s["tok"] is not None for s in data["samples"]]
    assert kept == [True, True] + [False] * 6
    assert "6 of 8 training samples have no token strip" in data["meta"]["notices"][-1]
    assert all(s["spans"] for s in data["samples"])


def test_graph_html_page(tmp_path, repo):
    from graphrl.viz.build import graph_output

    html = graph_output(Path(repo / "graphs" / "toolorchestra.yaml"), "html")
    assert_self_contained(html)
    assert html.startswith("<!DOCTYPE html>") and 'data-node="orchestrate"' in html


def test_nan_and_infinity_do_not_break_the_page(tmp_path):
    recs = write_synthetic(tmp_path / "t.jsonl", 1, 1, 40)
    recs[0]["rollout_reward"] = float("nan")  # Python's json writes NaN; orjson and browsers refuse it
    recs[0]["rollout"]["elapsed_s"] = float("inf")
    (tmp_path / "t.jsonl").write_text(json.dumps(recs[0]) + "\n")
    data = embedded(trajectory_output(tmp_path / "t.jsonl", "html", tokenizer="none"))
    assert data["rollouts"][0]["reward"] is None and data["rollouts"][0]["elapsed"] is None
    text = trajectory_output(tmp_path / "t.jsonl", "chrome-trace")
    assert "NaN" not in text and "Infinity" not in text and json.loads(text)["traceEvents"]
