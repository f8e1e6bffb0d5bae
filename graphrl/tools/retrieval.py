"""Retrieval client: a query -> numbered documents, over `POST /retrieve {queries: [q], topk}`.

Input: the service URL, one query, topk, a timeout, optionally the caller's pooled
`aiohttp.ClientSession` (a `ToolBox` passes its own: keep-alive connections, no TCP handshake per
call); without one, a session is opened for this call. Output: `ToolResult` whose text lists the
documents as "Doc 1: ...". Connection problems and bad responses (an HTTP error, a body that is not
JSON) are observations (ok=False). The body is JSON bytes both ways through the engines' wire codec
(orjson where installed): aiohttp's `json=` and `resp.json()` go through the stdlib `json` module.
"""

from __future__ import annotations

import json

import aiohttp

from ..engines._json import dumps, loads
from ..runtime.services import ToolResult

_JSON = {"Content-Type": "application/json"}


async def _post(
    session: aiohttp.ClientSession, endpoint: str, query: str, topk: int, timeout: float
) -> tuple[int, object]:
    """(HTTP status, the decoded JSON body; None unless the status is 200)."""
    body = dumps({"queries": [query], "topk": topk})
    async with session.post(endpoint, data=body, headers=_JSON, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        return resp.status, (_decode(await resp.read()) if resp.status == 200 else None)


def _decode(raw: bytes) -> object:
    """The body's JSON; what orjson refuses but Python's `json` reads (NaN, Infinity) goes through
    `json`, so a service written with `json.dumps` is read as before. ValueError when neither can."""
    try:
        return loads(raw)
    except ValueError:
        return json.loads(raw)


def format_docs(docs: list) -> str:
    lines = []
    for i, d in enumerate(docs, 1):
        if isinstance(d, dict):
            body = d.get("contents") or d.get("text") or d.get("document") or ""
            title = d.get("title")
            body = f"{title}\n{body}" if title and title not in body else body
        else:
            body = str(d)
        lines.append(f"Doc {i}: {str(body).strip()}")
    return "\n".join(lines) if lines else "No documents found."


async def retrieve(
    url: str, query: str, topk: int = 3, *, timeout: float = 30.0, session: aiohttp.ClientSession | None = None
) -> ToolResult:
    endpoint = url.rstrip("/") + ("" if url.rstrip("/").endswith("/retrieve") else "/retrieve")
    try:
        if session is None:
            async with aiohttp.ClientSession() as own:
                status, body = await _post(own, endpoint, query, topk, timeout)
        else:
            status, body = await _post(session, endpoint, query, topk, timeout)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return ToolResult(f"[retrieval failed: {type(exc).__name__}: {exc}]", ok=False, error=str(exc))
    if status != 200:
        return ToolResult(f"[retrieval failed: HTTP {status}]", ok=False, error=f"HTTP {status}")
    result = body.get("result", body) if isinstance(body, dict) else body
    docs = result[0] if isinstance(result, list) and result and isinstance(result[0], list) else result
    return ToolResult(format_docs(docs if isinstance(docs, list) else []))
