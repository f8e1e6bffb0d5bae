"""Named constants: `constants: {max_turns: 5}`, then `$max_turns` for any value of the graph.

Input: the desugared graph document and its locations. Output: the document with every string that
is exactly `$NAME` replaced by the constant's value (its type kept: `max_visits: $max_turns` is an
int), and E308 diagnostics for unknown names. Constants are also names in every template and
expression (the executor binds them); `constants` itself is left as it is.

Invariants: only whole values are replaced (text inside a template is Jinja's business: write
`{{ max_turns }}` there); paths do not change, so every replaced value keeps its location.
"""

from __future__ import annotations

import re
from typing import Any

from .diagnostics import Diagnostic, did_you_mean
from .yamlsrc import Located

REF = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")


def substitute_constants(doc: dict[str, Any], loc: Located) -> tuple[dict[str, Any], list[Diagnostic]]:
    constants = doc.get("constants")
    if not isinstance(constants, dict):
        constants = {}
    diags: list[Diagnostic] = []

    def walk(value: Any, path: tuple) -> Any:
        if isinstance(value, str):
            m = REF.match(value)
            if m is None:
                return value
            name = m.group(1)
            if name in constants:
                return constants[name]
            diags.append(
                Diagnostic(
                    "E308",
                    f"'${name}' names no constant",
                    loc.span(path),
                    did_you_mean(name, [str(k) for k in constants])
                    or "declare it under constants:, e.g. constants: {" + name + ": 3}",
                )
            )
            return value
        if isinstance(value, dict):
            if len(path) == 3 and path[0] == "nodes" and path[2] == "graph":
                return value  # an inline sub-graph: substituted as a graph of its own (with these constants)
            return {k: walk(v, path + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, path + (i,)) for i, v in enumerate(value)]
        return value

    out = {k: (v if k == "constants" else walk(v, (k,))) for k, v in doc.items()}
    return out, diags
