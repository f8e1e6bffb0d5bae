"""Shared fixtures of the tokenizer tests: the real Qwen tokenizer, and a double of one that splits its
special tokens into text (which the byte table and the segment memo must both refuse)."""

from __future__ import annotations

import pytest

from graphrl.models import tokenizer as qt


@pytest.fixture(scope="module")
def tok():
    return qt.qwen_tokenizer()


@pytest.fixture
def splitting_tokenizer_double(tok):
    """A test double: the Qwen backend behind a tokenizer set to split special tokens into text."""

    class SplittingTokenizerDouble:
        split_special_tokens = True
        backend_tokenizer = tok.backend_tokenizer

    return SplittingTokenizerDouble()
