"""Helpers the commands share: the diagnostics report on the terminal, KEY=VALUE option parsing."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from ..app.report import report
from ..spec.diagnostics import Diagnostic


def print_report(results: Sequence[tuple[str, Sequence[Diagnostic]]], as_json: bool = False) -> int:
    """Print diagnostics (stderr; JSON on stdout with `as_json`); returns 0, or 3 on errors."""
    return report(results, as_json, out=click.echo, err=lambda s: click.echo(s, err=True))


def key_values(
    values: Sequence[str], option: str, what: str = "KEY=VALUE", *, json_values: bool = False
) -> dict[str, object]:
    """`("a=1", "b=x")` -> `{"a": 1, "b": "x"}` (values as JSON when `json_values` and they parse)."""
    out: dict[str, object] = {}
    for v in values:
        key, sep, raw = v.partition("=")
        if not sep or not key or (not raw and not json_values):
            raise click.BadParameter(f"expected {what}, got {v!r}", param_hint=option)
        if json_values:
            try:
                out[key] = json.loads(raw)
            except ValueError:
                out[key] = raw
        else:
            out[key] = raw
    return out
