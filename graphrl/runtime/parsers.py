"""Parsers: model output text -> fields. Model output is data: nothing here evaluates it.

Input: the decoded text of one llm call and the node's `Parse` spec.
Output: `ParseResult(ok, fields)`. All parsers named in one `Parse` block must succeed for `ok`;
otherwise its `fallback` is tried; fields no parser produced take `default` values. A parse failure
is never an exception: it is `ok=False`, and graphs route on it.

Invariants: `call` uses `ast.parse` on the text (never `eval`/`exec`), accepting only literal
arguments; `json`/`tool_calls` use `json.loads`; \\boxed{} matching counts nested braces.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..spec.model import Parse, snake

_THINK_END = "</think>"
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass(frozen=True)
class ParseResult:
    ok: bool
    fields: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def strip_think(text: str) -> str:
    """Everything after the last </think> (the whole text when there is none)."""
    i = text.rfind(_THINK_END)
    return text[i + len(_THINK_END) :] if i >= 0 else text


def strip_markdown(text: str) -> str:
    return text.replace("**", "").replace("__", "")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), nested braces counted; None if absent/unclosed."""
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    if not starts:
        return None
    # Only the last one counts: an unclosed last \boxed{ (a cut-off answer) is no answer, never an
    # earlier, superseded \boxed{} (as slime's/MATH's last_boxed_only_string).
    depth, start = 1, starts[-1]
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def last_tag(text: str, tag: str) -> str | None:
    matches = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.S)
    return matches[-1].strip() if matches else None


def field_blocks(text: str, names: list[str]) -> dict[str, str]:
    """'Key: value' blocks; a value runs until the next known key line; last occurrence wins."""
    keys = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"^[ \t#>*-]*({keys})[ \t]*:[ \t]*", re.M | re.I)
    marks = list(pattern.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        canonical = next(n for n in names if n.lower() == m.group(1).lower())
        out[snake(canonical)] = text[m.end() : end].strip()
    return out


def first_json(text: str) -> Any:
    """The whole text as JSON, else the first decodable {...} or [...] in it. Raises ValueError."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[{\[]", text):
        try:
            return decoder.raw_decode(text, m.start())[0]
        except ValueError:
            continue
    raise ValueError("no JSON value found")


def tool_calls(text: str) -> list[dict[str, Any]]:
    """Every <tool_call>{"name":..., "arguments":{...}}</tool_call>. Raises ValueError when none/invalid."""
    calls = []
    for body in _TOOL_CALL.findall(text):
        obj = json.loads(body.strip())
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ValueError("a tool call needs a string 'name'")
        args = obj.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args)
        if not isinstance(args, dict):
            raise ValueError("tool call 'arguments' must be an object")
        calls.append({"name": obj["name"], "arguments": args})
    if not calls:
        raise ValueError("no <tool_call> block")
    return calls


def python_call(text: str) -> dict[str, Any]:
    """The last Python-call-like statement, e.g. `x = tool.execute(query="...")`, as {func, args}.

    Parsed with `ast`; only literal arguments are accepted (never evaluated as code)."""
    blocks = _FENCE.findall(text) or [text]
    for block in reversed(blocks):
        for line in reversed(block.strip().splitlines()):
            try:
                tree = ast.parse(line.strip())
            except SyntaxError:
                continue
            if not tree.body or not isinstance(tree.body[-1], (ast.Expr, ast.Assign)):
                continue
            call = tree.body[-1].value
            if not isinstance(call, ast.Call):
                continue
            try:
                args = {kw.arg or "**": ast.literal_eval(kw.value) for kw in call.keywords}
                pos = [ast.literal_eval(a) for a in call.args]
            except ValueError:
                continue
            return {"func": ast.unparse(call.func), "args": args, "positional": pos}
    raise ValueError("no call found")


def _one(p: Parse, text: str, custom: Callable[[str], Callable[[str], Any]] | None) -> ParseResult:
    if p.strip_think:
        text = strip_think(text)
    if p.strip_markdown:
        text = strip_markdown(text)
    fields: dict[str, Any] = {}
    problems: list[str] = []
    if p.boxed:
        v = last_boxed(text)
        (problems.append("no \\boxed{}") if v is None else fields.__setitem__(p.boxed, v.strip()))
    for tag in p.tags or ():
        v = last_tag(text, tag)
        (problems.append(f"no <{tag}>") if v is None else fields.__setitem__(tag, v))
    if p.fields:
        found = field_blocks(text, p.fields)
        missing = [f for f in p.fields if snake(f) not in found]
        fields.update(found)
        if missing:
            problems.append("missing " + ", ".join(missing))
    for name, pattern in (p.regex or {}).items():
        ms = list(re.finditer(pattern, text or "", re.S))
        if not ms:
            problems.append(f"regex {name} did not match")
        else:
            fields[name] = (ms[-1].group(1) if ms[-1].groups() else ms[-1].group(0)) or ""
    for target, fn in ((p.json_, first_json), (p.tool_calls, tool_calls), (p.call, python_call)):
        if target:
            try:
                fields[target] = fn(text)
            except ValueError as exc:
                problems.append(f"{target}: {exc}")
    if p.code:
        m = _FENCE.search(text)
        (problems.append("no fenced code block") if m is None else fields.__setitem__(p.code, m.group(1)))
    if p.function and custom is not None:
        try:
            got = custom(p.function)(text)
        except Exception as exc:  # user parser: its failure is a parse failure, not a crash
            got, problems = None, problems + [f"{p.function} raised {type(exc).__name__}: {exc}"]
        if isinstance(got, dict):
            fields.update(got)
        elif got is not None or not problems:
            problems.append(f"{p.function} returned no fields")
    return ParseResult(not problems, fields, "; ".join(problems) or None)


def parse_output(
    p: Parse | None, text: str, custom: Callable[[str], Callable[[str], Any]] | None = None
) -> ParseResult:
    """Run a parse block with fallbacks and defaults."""
    if p is None:
        return ParseResult(True)
    declared = dict.fromkeys(p.declared_fields or (), None)  # every declared field exists, None if not found
    current: Parse | None = p
    first: ParseResult | None = None
    while current is not None:
        res = _one(current, text, custom)
        if res.ok:
            return ParseResult(True, {**declared, **(p.default or {}), **res.fields})
        first = first or res
        current = current.fallback
    assert first is not None
    return ParseResult(False, {**declared, **(p.default or {}), **first.fields}, first.error)
