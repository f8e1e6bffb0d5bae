"""SGLang sampling params (validation, defaults) and one sampling step (cuts, log-probs, seeds)."""

from __future__ import annotations

import math

import pytest

from graphrl.engines.sampling import SamplingParams

torch = pytest.importorskip("torch")

from graphrl.engines.sampling import sample_next


def test_defaults_are_sglangs():
    p = SamplingParams.from_mapping({})
    assert (p.max_new_tokens, p.temperature, p.top_p, p.top_k, p.min_p) == (128, 1.0, 1.0, -1, 0.0)
    assert p.skip_special_tokens and not p.no_stop_trim and not p.ignore_eos
    assert SamplingParams.from_mapping(None) == p


def test_from_mapping_coerces_and_accepts_slime_params():
    p = SamplingParams.from_mapping(
        {
            "max_new_tokens": 16,
            "temperature": 1,
            "top_p": 1.0,
            "top_k": -1,
            "stop": "</s>",
            "stop_token_ids": [151645],
            "skip_special_tokens": False,
            "no_stop_trim": True,
            "spaces_between_special_tokens": False,
            "sampling_seed": 3,
            "frequency_penalty": 0.0,
            "min_new_tokens": None,
        }
    )
    assert p.stop == ("</s>",) and p.stop_token_ids == (151645,) and p.temperature == 1.0
    assert p.sampling_seed == 3 and p.min_new_tokens == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"nope": 1},
        {"top_k": 0},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"temperature": -1},
        {"max_new_tokens": -1},
        {"max_new_tokens": 1.5},
        {"stop": [1]},
        {"stop": [""]},
        {"stop_token_ids": ["a"]},
        {"ignore_eos": "yes"},
        {"repetition_penalty": 1.2},
        {"ebnf": "root ::= x"},
        {"regex": ""},
        {"regex": "a", "json_schema": "{}"},
        {"json_schema": 3},
        {"n": 2},
        {"min_p": 2.0},
    ],
)
def test_rejects_bad_or_unsupported_params(bad):
    with pytest.raises(ValueError):
        SamplingParams.from_mapping(bad)


def test_greedy_rules():
    assert SamplingParams(temperature=0.0).greedy
    assert SamplingParams(temperature=0.7, top_k=1).greedy
    assert not SamplingParams(temperature=0.7).greedy


LOGITS = torch.tensor([2.0, 1.5, 0.8, -0.5, -3.0])


def draw(params, n=3000, seed=0):
    gen = torch.Generator().manual_seed(seed)
    counts = [0] * len(LOGITS)
    for _ in range(n):
        token, _ = sample_next(LOGITS, params, gen)
        counts[token] += 1
    return [c / n for c in counts]


def test_greedy_step_reports_raw_log_softmax():
    token, lp = sample_next(LOGITS, SamplingParams(temperature=0.0), torch.Generator())
    assert token == 0
    assert lp == pytest.approx(float(torch.log_softmax(LOGITS, -1)[0]), abs=1e-6)
    token, lp = sample_next(LOGITS, SamplingParams(temperature=0.3, top_k=1), torch.Generator())
    assert token == 0 and lp == pytest.approx(float(torch.log_softmax(LOGITS, -1)[0]), abs=1e-6)


def test_full_distribution_frequencies_and_logprob():
    params = SamplingParams(temperature=0.8)
    probs = torch.softmax(LOGITS / 0.8, -1).tolist()
    freq = draw(params)
    for f, p in zip(freq, probs):
        assert abs(f - p) < 0.03
    gen = torch.Generator().manual_seed(1)
    token, lp = sample_next(LOGITS, params, gen)
    assert lp == pytest.approx(math.log(probs[token]), abs=1e-5)


def test_top_k_top_p_min_p_cuts():
    assert set(i for i, f in enumerate(draw(SamplingParams(top_k=2))) if f) == {0, 1}
    probs = torch.softmax(LOGITS, -1).tolist()  # ~[0.50, 0.30, 0.15, 0.04, 0.003]
    # mass before token 1 is 0.50 <= 0.6 (kept); before token 2 it is 0.80 > 0.6 (cut)
    assert set(i for i, f in enumerate(draw(SamplingParams(top_p=0.6))) if f) == {0, 1}
    assert set(i for i, f in enumerate(draw(SamplingParams(top_p=0.4))) if f) == {0}
    cut = probs[0] * 0.25  # keeps tokens with p >= 0.125
    kept = {i for i, p in enumerate(probs) if p >= cut}
    assert set(i for i, f in enumerate(draw(SamplingParams(min_p=0.25))) if f) == kept
    # renormalised inside the cut, but the reported log-prob is the pre-cut one (SGLang)
    freq = draw(SamplingParams(top_k=2))
    assert abs(freq[0] - probs[0] / (probs[0] + probs[1])) < 0.03
    token, lp = sample_next(LOGITS, SamplingParams(top_k=2), torch.Generator().manual_seed(0))
    assert lp == pytest.approx(math.log(probs[token]), abs=1e-5)


def test_top_p_on_a_large_flat_vocabulary_uses_the_full_sort():
    logits = torch.zeros(10000)
    logits[:3] = 0.01
    gen = torch.Generator().manual_seed(0)
    seen = {sample_next(logits, SamplingParams(top_p=0.9), gen)[0] for _ in range(200)}
    assert len(seen) > 100 and max(seen) < 10000


def test_original_logprob_mode():
    gen = torch.Generator().manual_seed(0)
    token, lp = sample_next(LOGITS, SamplingParams(temperature=0.5), gen, logprob_mode="original")
    assert lp == pytest.approx(float(torch.log_softmax(LOGITS, -1)[token]), abs=1e-6)


def test_same_generator_seed_same_tokens():
    assert draw(SamplingParams(), n=200, seed=5) == draw(SamplingParams(), n=200, seed=5)
    assert draw(SamplingParams(), n=200, seed=5) != draw(SamplingParams(), n=200, seed=6)
