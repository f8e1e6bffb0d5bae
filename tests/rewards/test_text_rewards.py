"""Text rewards: SQuAD-style normalisation, lists of gold answers (max), boxed extraction in a tail."""

from __future__ import annotations

import pytest

from graphrl.rewards.text import exact_match, extract, f1, normalize, sub_em


def test_normalize_lowercases_drops_punctuation_articles_and_extra_space():
    assert normalize("  The  Eiffel-Tower, in  Paris! ") == "eiffeltower in paris"
    assert normalize("An apple a day") == "apple day"


def test_exact_match_takes_the_max_over_gold_answers():
    assert exact_match("The Eiffel Tower!", ["Louvre", "eiffel tower"]) == 1.0
    assert exact_match("Eiffel Tower", ["Louvre", "Notre Dame"]) == 0.0
    assert exact_match("Eiffel Tower", "the eiffel tower") == 1.0
    assert exact_match("Eiffel Tower in Paris", "Eiffel Tower") == 0.0  # exact, not contained


def test_f1_is_token_overlap_max_over_golds():
    assert f1("the big red dog", "red dog") == pytest.approx(0.8)  # p 2/3, r 1
    assert f1("red dog", ["cat", "big red dog"]) == pytest.approx(0.8)
    assert f1("blue cat", "red dog") == 0.0
    assert f1("dog dog", "dog") == pytest.approx(2 * 0.5 * 1 / 1.5)  # repeated tokens count once each


def test_sub_em_is_containment_of_any_gold():
    assert sub_em("It was Frank Herbert, I think.", ["F. Herbert", "Frank Herbert"]) == 1.0
    assert sub_em("It was Herbert.", ["Frank Herbert"]) == 0.0
    assert sub_em("anything", "") == 0.0  # an empty gold is contained everywhere: never a match


def test_extract_boxed_scores_the_last_boxed_only():
    pred = r"First \boxed{London}, no: \boxed{Paris}. The end."
    assert exact_match(pred, "paris", extract="boxed") == 1.0
    assert exact_match(pred, "london", extract="boxed") == 0.0
    assert exact_match("Paris, no box", "paris", extract="boxed") == 0.0
    assert f1(r"\boxed{red dog}", "red dog", extract="boxed") == 1.0
    assert sub_em(r"\boxed{Frank Herbert wrote it}", "Frank Herbert", extract="boxed") == 1.0


def test_tail_chars_keeps_only_the_end_of_the_prediction():
    pred = r"\boxed{Paris}" + " filler" * 50  # 350 chars after the box
    assert exact_match(pred, "Paris", extract="boxed", tail_chars=300) == 0.0
    assert exact_match(pred, "Paris", extract="boxed", tail_chars=400) == 1.0
    assert extract("abcdef", "none", 3) == "def"
    assert exact_match("xx Paris", "paris", tail_chars=5) == 1.0
    with pytest.raises(ValueError, match="extract"):
        exact_match("x", "x", extract="tags")
