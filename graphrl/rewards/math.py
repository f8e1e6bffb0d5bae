"""Math answers: the last \\boxed{} of a prediction vs a label, after answer normalisation.

`normalize_math` removes presentation (spaces, $, \\left/\\right, \\!, \\text{}, trailing dot,
`\\dfrac`->`\\frac`, degree marks, "x =" prefixes) and `math_equivalent` also compares numeric
values (integers, decimals, simple fractions, percentages) when both sides parse as numbers.
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
    for a, b in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\dfrac", "\\frac"),
                 ("\\tfrac", "\\frac"), ("^\\circ", ""), ("^{\\circ}", ""), ("\\$", ""), ("$", ""), ("\\%", "%")):
        s = s.replace(a, b)
    s = re.sub(r"^[a-zA-Z]\s*=\s*", "", s.strip())
    s = s.replace(" ", "").rstrip(".")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    return s


def _number(s: str) -> Fraction | None:
    s = s.replace(",", "") if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s) else s
    pct = s.endswith("%")
    s = s.rstrip("%")
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    try:
        if m:
            value = Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1)
        elif re.fullmatch(r"-?\d+/\d+", s):
            a, b = s.split("/")
            value = Fraction(int(a), int(b))
        elif re.fullmatch(r"-?\d+(\.\d+)?", s):
            value = Fraction(s)
        else:
            return None
    except (ValueError, ZeroDivisionError):
        return None
    return value / 100 if pct else value


def math_equivalent(prediction: str, label: str) -> bool:
    p, g = normalize_math(prediction), normalize_math(label)
    if not p:
        return False
    if p == g:
        return True
    pn, gn = _number(p), _number(g)
    return pn is not None and gn is not None and pn == gn
