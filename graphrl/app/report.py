"""Diagnostics of one or more graph files -> the report commands print, and its exit code.

Input: `[(file, diagnostics)]`, whether JSON is wanted, and where text goes (`out`, `err`).
Output: the exit code (0, or 3 when any file has an error); the report written through `out`
(JSON on stdout) or `err` (rendered diagnostics with source lines and carets, then one status line
per file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ..errors import EXIT_INVALID, EXIT_OK
from ..spec.diagnostics import Diagnostic, SourceCache, has_errors

Echo = Callable[[str], None]


def report(results: Sequence[tuple[str, Sequence[Diagnostic]]], as_json: bool, *, out: Echo, err: Echo) -> int:
    failed = any(has_errors(d) for _, d in results)
    if as_json:
        out(
            json.dumps(
                {
                    "ok": not failed,
                    "files": [
                        {"file": f, "ok": not has_errors(d), "diagnostics": [x.to_json() for x in d]}
                        for f, d in results
                    ],
                },
                indent=2,
            )
        )
    else:
        sources = SourceCache()
        for f, diags in results:
            for d in diags:
                err(d.render(sources) + "\n")
            errors = sum(d.severity == "error" for d in diags)
            warnings = len(diags) - errors
            status = "ok" if not errors else "FAILED"
            err(f"{f}: {status} ({errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)})")
    return EXIT_INVALID if failed else EXIT_OK
