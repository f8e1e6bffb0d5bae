"""Reading trajectories (graphrl run JSONL, slime .pt dumps) and what is drawn from them:
display spans, the viewer payload, Chrome trace JSON, the terminal preview."""

from __future__ import annotations

import base64
import json
from array import array

import pytest
from synth import write_synthetic
from vizkit import real_records, real_run  # noqa: F401 (pytest fixtures)

from graphrl.viz.payload import build_payload, display_spans
from graphrl.viz.textview import text_view
from graphrl.viz.tokens import TokenText, Vocab, join_texts, load_vocab
from graphrl.viz.trace import chrome_trace
from graphrl.viz.trajectory import TrajectoryError, load_jsonl, load_pt, load_trajectory


def test_real_run_is_read_back_exactly(real_run, real_records):
    traj = load_trajectory(real_run)
    assert traj.graph == "multiturn"
    assert [(r.group, r.n) for r in traj.rollouts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    by_rollout = {rec["rollout_id"]: rec for rec in real_records if rec.get("tokens")}
    for r in traj.rollouts:
        rec = by_rollout[r.rollout_id]
        (s,) = r.samples
        assert list(s.tokens) == rec["tokens"] and list(s.loss_mask) == rec["loss_mask"]
        assert [list(p) for p in r.path] == rec["rollout"]["path"]
        spans = display_spans(s)
        assert len(spans) == len(rec["spans"])  # the runtime's spans never mix masks
        assert sum(b - a for _, _, a, b, m, _ in spans if m) == sum(rec["loss_mask"])
        assert [sp[0] for sp in spans] == [sp["node"] for sp in rec["spans"]]


def test_display_spans_fill_gaps_and_cut_at_mask_changes(tmp_path):
    recs = write_synthetic(tmp_path / "t.jsonl", 1, 1, 300)
    rec = recs[0]
    rec["spans"] = [{"node": "turn", "visit": 1, "start": 10, "end": 200, "mask": 1, "kind": "generated"}]
    (tmp_path / "t.jsonl").write_text(json.dumps(rec) + "\n")
    (s,) = load_jsonl(tmp_path / "t.jsonl").rollouts[0].samples
    spans = display_spans(s)
    assert spans[0][:4] == ("?", 0, 0, 10)
    assert spans[-1][3] == 300 and spans[-1][0] == "?"
    assert all(b > a for _, _, a, b, _, _ in spans)
    assert all(len({s.loss_mask[i] for i in range(a, b)}) == 1 and s.loss_mask[a] == m for _, _, a, b, m, _ in spans)
    assert sum(b - a for *_, a, b, m, _ in spans if m) == sum(s.loss_mask)


@pytest.mark.parametrize(
    "content, located",
    [
        ('{"group": 0, "rollout_id": 0}\n{"group": 0, "rollout_id": \n{"x": 1}\n', "t.jsonl:2:"),
        ("[1, 2]\n", "t.jsonl:1:1: a trajectory line must be a JSON object"),
        ('{"prompt": "a data row"}\n', "t.jsonl:1:1: not a graphrl trajectory line"),
        (
            '{"group": 0, "rollout_id": 0, "tokens": [1, 2, 3], "response_length": 2, "loss_mask": [1]}\n',
            "t.jsonl:1: loss_mask has 1 entries, response_length is 2",
        ),
        (
            '{"group": 0, "rollout_id": 0, "tokens": [1, 2, 3], "response_length": 2, "loss_mask": [1, 1], '
            '"rollout_log_probs": [0, 0], "spans": [{"node": "a", "start": 0, "end": 5}]}\n',
            "outside the response",
        ),
    ],
)
def test_malformed_lines_are_located(tmp_path, content, located):
    p = tmp_path / "t.jsonl"
    p.write_text(content)
    with pytest.raises(TrajectoryError, match=located.replace("(", r"\(")):
        load_jsonl(p)


def test_an_unfinished_last_line_is_skipped_with_a_note(tmp_path):
    recs = write_synthetic(tmp_path / "t.jsonl", 1, 2, 50)
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(recs[0]) + "\n" + json.dumps(recs[1])[:100])
    traj = load_jsonl(p)
    assert len(traj.rollouts) == 1 and "unfinished last line" in traj.notes[0] and "t.jsonl:2" in traj.notes[0]


def test_slime_debug_dump(tmp_path, real_records):
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    samples = []
    for rec in real_records:
        meta = {
            "graphrl": {
                "spans": rec["spans"],
                "calls": rec["calls"],
                "path": rec["rollout"]["path"],
                "rollout_id": rec["rollout_id"],
            }
        }
        as_dict = {
            "group_index": rec["group"],
            "index": rec["rollout_id"],
            "tokens": rec["tokens"],
            "response_length": rec["response_length"],
            "loss_mask": rec["loss_mask"],
            "rollout_log_probs": rec["rollout_log_probs"],
            "reward": rec["reward"],
            "status": rec["status"],
            "metadata": meta,
        }
        samples.append(as_dict if rec["group"] == 0 else SimpleNamespace(**as_dict))  # to_dict() or objects
    samples[0]["tokens"] = torch.tensor(samples[0]["tokens"])  # tensors are accepted too
    torch.save({"rollout_id": 3, "samples": samples}, tmp_path / "rollout_3.pt")
    pt = load_pt(tmp_path / "rollout_3.pt")
    assert [(r.group, r.n, r.rollout_id) for r in pt.rollouts] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    for r, rec in zip(pt.rollouts, real_records):
        assert list(r.samples[0].tokens) == rec["tokens"] and r.path and r.calls
        assert r.samples[0].spans == load_jsonl_spans(rec)
    # without graphrl metadata: spans are the runs of equal loss mask, node '?'
    plain = [{"tokens": [1, 2, 3, 4, 5], "response_length": 4, "loss_mask": [1, 1, 0, 1], "status": "completed"}]
    torch.save(plain, tmp_path / "plain.pt")
    (s,) = load_pt(tmp_path / "plain.pt").rollouts[0].samples
    assert [(a, b, m) for _, _, a, b, m, _ in s.spans] == [(0, 2, 1), (2, 3, 0), (3, 4, 1)]
    (tmp_path / "bad.pt").write_bytes(b"not a pickle")
    with pytest.raises(TrajectoryError, match="bad.pt: not a readable torch file"):
        load_pt(tmp_path / "bad.pt")


def load_jsonl_spans(rec):
    return tuple((sp["node"], sp["visit"], sp["start"], sp["end"], sp["mask"], sp["kind"]) for sp in rec["spans"])


def test_payload_counts_and_cap(tmp_path):
    recs = write_synthetic(tmp_path / "t.jsonl", 2, 3, 500)
    traj = load_jsonl(tmp_path / "t.jsonl")
    vocab = Vocab("ids")
    full = build_payload(traj, vocab, ["turn", "observe"])
    assert [s["trained"] for s in full["samples"]] == [sum(r["loss_mask"]) for r in recs]
    assert [s["masked"] for s in full["samples"]] == [r["response_length"] - sum(r["loss_mask"]) for r in recs]
    assert full["nodes"][:2] == ["turn", "observe"] and full["meta"]["omitted"] == 0
    ids = array("I", base64.b64decode(full["vocab"]["ids"]))
    tok = array("H", base64.b64decode(full["samples"][0]["tok"]))
    assert [ids[i] for i in tok] == recs[0]["tokens"]
    lp = array("H", base64.b64decode(full["samples"][0]["lp"]))
    assert all(abs(-q / 1000 - v) <= 0.00051 for q, v in zip(lp, recs[0]["rollout_log_probs"]))
    one = len(recs[0]["tokens"])
    capped = build_payload(traj, vocab, ["turn"], max_tokens=2 * one + 1)
    assert [s["tok"] is not None for s in capped["samples"]] == [True, True, False, False, False, False]
    assert capped["meta"]["omitted"] == 4 and "4 of 6 training samples" in capped["meta"]["notices"][0]
    assert capped["samples"][5]["spans"] == full["samples"][5]["spans"]  # spans stay


def test_token_texts_join_partial_utf8():
    table = {
        1: TokenText("a"),
        2: TokenText(None, "é".encode()[:1]),
        3: TokenText(None, "é".encode()[1:]),
        4: TokenText(None, b"\xff"),
    }
    assert join_texts([1, 2, 3, 1], table) == ["a", "", "é", "a"]
    assert join_texts([2, 1], table)[0] == "\ufffd"
    assert join_texts([4, 1], table)[0] == "\ufffd"


def test_qwen_vocab_and_fallback():
    from graphrl.viz.tokens import TokenizerUnavailable

    vocab, note = load_vocab("qwen")
    if note:
        pytest.skip(note)
    texts = vocab.lookup([151644, 8948, 198])
    assert texts[151644].special and texts[151644].text == "<|im_start|>"
    assert texts[198].text == "\n" and not texts[198].special
    with pytest.raises(TokenizerUnavailable):  # a tokenizer the user names must load (exit 2)
        load_vocab("/nonexistent/tokenizer")
    fallback, note = load_vocab(None, "/nonexistent/tokenizer")  # a recorded one may be missing here
    assert fallback.name == "qwen" and "unavailable here" in note


def test_chrome_trace(real_run):
    traj = load_trajectory(real_run)
    trace = chrome_trace(traj)
    json.dumps(trace)
    ev = trace["traceEvents"]
    assert all({"name", "ph", "pid", "tid"} <= set(e) for e in ev)
    complete = [e for e in ev if e["ph"] == "X" and e["cat"] != "rollout"]
    assert len(complete) == sum(len(r.calls) for r in traj.rollouts)
    for r in traj.rollouts:  # calls of one rollout follow one another
        mine = [e for e in complete if (e["pid"], e["tid"]) == (r.group + 1, r.n + 1)]
        assert all(b["ts"] >= a["ts"] + a["dur"] - 1e-3 for a, b in zip(mine, mine[1:]))
        assert {e["args"]["endpoint"] for e in mine} == {"policy", "tool:echo_tool:observe"}
    names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"prompt group 0", "prompt group 1"}


def test_text_view(real_run, real_records):
    traj = load_trajectory(real_run).select(0, 1)
    vocab, _ = load_vocab("none")
    plain = text_view(traj, vocab, color=False)
    assert "\x1b[" not in plain
    assert "== group 0 · sample 1" in plain and "path: turn#1 -> observe#1 -> turn#2" in plain
    rec = next(r for r in real_records if (r["group"], r["n"]) == (0, 1))
    assert plain.count("[turn#") + plain.count("[observe#") == len(rec["spans"])
    coloured = text_view(traj, vocab, color=True)
    assert "\x1b[48;5;" in coloured and "\x1b[2m" in coloured
    short = text_view(traj, vocab, color=False, max_tokens=5)
    assert f"{rec['response_length'] - 5} more tokens" in short
