"""Text-answer rewards: prediction + gold answer(s) -> score in [0, 1].

Normalisation: LaTeX presentation is stripped first (`\\text{x}` and similar wrappers keep their
content; `$`, `\\(`, `\\)`, `\\[`, `\\]` and spacing commands go), then SQuAD style: lower-case, drop
punctuation and the articles a/an/the, collapse whitespace. A label may be a list of gold answers:
the score is the max over them.
`extract="boxed"` scores the last \\boxed{} of the prediction (of its last `tail_chars` characters
when given) instead of the whole text; no \\boxed{} scores 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..runtime.parsers import last_boxed

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_WRAPPER = re.compile(r"\\(?:text|textbf|textit|texttt|textrm|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}")
_DELIMS = re.compile(r"\$|\\[()\[\]]")
_SPACING = re.compile(r"\\[,;:! ]|~")


def strip_latex(text: str) -> str:
    """LaTeX presentation -> plain text: wrappers keep their content, math delimiters and spacing go."""
    s, previous = str(text), None
    while s != previous:  # nested wrappers, innermost first
        previous, s = s, _WRAPPER.sub(r"\1", s)
    return _SPACING.sub(" ", _DELIMS.sub("", s))


def normalize(text: Any) -> str:
    s = strip_latex(str(text)).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def golds(label: Any) -> list[str]:
    if isinstance(label, (list, tuple)):
        return [str(x) for x in label]  # no gold answer: every score is 0
    return [str(label)]


def extract(prediction: Any, how: str | None, tail_chars: int | None) -> str | None:
    text = str(prediction)
    if tail_chars:
        text = text[-int(tail_chars) :]
    if how in (None, "", "none"):
        return text
    if how == "boxed":
        return last_boxed(text)
    raise ValueError(f"extract must be 'boxed' or 'none', got {how!r}")


def _best(score: Callable[[str, str], float], prediction: Any, label: Any, how, tail) -> float:
    pred = extract(prediction, how, tail)
    if pred is None:
        return 0.0
    return max((score(pred, g) for g in golds(label)), default=0.0)


def _em(p: str, g: str) -> float:
    return float(normalize(p) == normalize(g))


def _sub(p: str, g: str) -> float:
    g = normalize(g)
    return float(bool(g) and g in normalize(p))


def _f1(p: str, g: str) -> float:
    pt, gt = normalize(p).split(), normalize(g).split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if not pt or not gt:
        return float(pt == gt)
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction, label, extract=None, tail_chars=None) -> float:
    return _best(_em, prediction, label, extract, tail_chars)


def sub_em(prediction, label, extract=None, tail_chars=None) -> float:
    return _best(_sub, prediction, label, extract, tail_chars)


def f1(prediction, label, extract=None, tail_chars=None) -> float:
    return _best(_f1, prediction, label, extract, tail_chars)


def format_match(text: Any, pattern: str) -> float:
    """1.0 when `pattern` (a regular expression) is found in `text` (`.` matches newlines), else 0.0."""
    return 1.0 if re.search(pattern, "" if text is None else str(text), re.DOTALL) else 0.0


def tool_use(calls: Any, min: Any = 1) -> float:
    """1.0 when `calls` (a count) is at least `min`, else 0.0; a missing count is 0."""
    try:
        return 1.0 if float(calls or 0) >= float(min) else 0.0
    except (TypeError, ValueError):
        return 0.0
