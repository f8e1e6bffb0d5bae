"""Update-only nodes: no call; the executor applies `update:` and follows `next:`."""

from __future__ import annotations

from .base import Handler, no_call

HANDLER = Handler(run=no_call)
