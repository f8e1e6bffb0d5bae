"""Math answers: the last \\boxed{} of a prediction vs a label, after answer normalisation.

`normalize_math` removes presentation (spaces, $, \\left/\\right, \\!, \\text{}, trailing dot,
`\\dfrac`->`\\frac`, degree marks, "x =" prefixes) and `math_equivalent` also compares numeric
values (integers, decimals, simple fractions, percentages) when both sides parse as numbers; a
percentage matches both its number and its fraction ("50\\%" equals "50" and "0.5").
"""

from __future__ import annotations

import re
from fractions import Fraction

from ..runtime.parsers import last_boxed


def normalize_math(answer: str) -> str:
    s = str(answer).strip()
    inner = last_boxed(s)
    if inner is not None:
        s = inner
    s = re.sub(r"\\text\{([^}]*)\}", r"\1", s)
    s = re.sub(r"\\(?:mathrm|mathbf)\{([^}]*)\}", r"\1", s)
    for a, b in (
        ("\\left", ""),
        ("\\right", ""),
        ("\\!", ""),
        ("\\,", ""),
        ("\\;", ""),
        ("\\dfrac", "\\frac"),
        ("\\tfrac", "\\frac"),
        ("^\\circ", ""),
        ("^{\\circ}", ""),
        ("\\$", ""),
        ("$", ""),
        ("\\%", "%"),
    ):
        s = s.replace(a, b)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s.strip())
    s = s.replace(" ", "").rstrip(".")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    return s


def _number(s: str) -> Fraction | None:
    """The value of a plain number (integer, decimal, 1,000-style, a/b, \\frac{a}{b}); None otherwise."""
    s = s.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s) else s
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    try:
        if m:
            return Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1)
        if re.fullmatch(r"-?\d+/\d+", s):
            a, b = s.split("/")
            return Fraction(int(a), int(b))
        if re.fullmatch(r"-?\d+(\.\d+)?", s):
            return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def _values(s: str) -> set[Fraction]:
    """A percentage stands for itself and for its fraction: "50%" -> {50, 1/2} (so it matches "50" and "0.5")."""
    pct = s.endswith("%")
    v = _number(s[:-1] if pct else s)
    if v is None:
        return set()
    return {v, v / 100} if pct else {v}


def math_equivalent(prediction: str, label: str) -> bool:
    p, g = normalize_math(prediction), normalize_math(label)
    if not p:
        return False
    if p == g:
        return True
    return bool(_values(p) & _values(g))
