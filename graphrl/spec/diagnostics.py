"""Diagnostics: the one error type of graphrl.

Input: a code, a message, a source span and an optional hint.
Output: `Diagnostic` values, rendered as

    path:line:col: error[E101]: message
       12 |     next: nxt_step
          |           ^^^^^^^^
       = help: did you mean 'next_step'?

Invariants: every code is listed in `CODES` (and documented in docs/errors.md, which a test keeps
in sync); severity is derived from the code (E = error, W = warning); lines and columns are 1-based.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# code -> (short name, one-line summary). docs/errors.md documents each one; tests check both agree.
CODES: dict[str, tuple[str, str]] = {
    "E001": ("yaml-syntax", "the file is not valid YAML"),
    "E002": ("unknown-key", "a key the graph language does not know (never silently ignored)"),
    "E003": ("wrong-type", "a value has the wrong type or an invalid value"),
    "E004": ("duplicate-key", "the same key appears twice in one mapping"),
    "E005": ("duplicate-node", "two nodes share one id"),
    "E006": ("missing-key", "a required key is missing"),
    "E007": ("file-not-found", "a graph or template file does not exist or cannot be read"),
    "E008": (
        "bad-include",
        "an include: that cannot be merged (missing, outside the folder, a cycle, a section it cannot hold)",
    ),
    "E009": ("include-conflict", "a name or section defined both in a graph and in a file it includes, or twice"),
    "E101": ("unknown-node", "an edge or reference names a node that does not exist"),
    "E102": ("unreachable-node", "no path leads from the start node to this node"),
    "E103": ("no-path-to-end", "from this node the rollout can never finish"),
    "E104": ("unbounded-loop", "a cycle with no max_visits bound"),
    "E105": ("no-default-branch", "a router or conditional edge list without a default branch"),
    "E106": ("reserved-name", "a node, state or input name clashes with a reserved or existing name"),
    "E107": ("foreach-over-text", "foreach over a text without chunk_tokens would iterate its characters"),
    "E201": ("template-syntax", "a Jinja template does not parse"),
    "E202": ("unbound-variable", "a template or expression uses a name no input, state or upstream node binds"),
    "E203": ("expression-syntax", "a Jinja expression does not parse"),
    "E204": ("unknown-field", "a reference to a field that the node's parser never produces"),
    "E205": ("unsafe-template", "a template reaches for Python internals (`_` attributes, format, attr)"),
    "E301": ("unknown-model", "an llm node, reward or slime.teacher names a model that is not declared"),
    "E302": ("unknown-tool", "a tool name that is neither built in nor an importable module:function"),
    "E303": ("bad-import", "a module:function path that cannot be imported"),
    "E304": ("bad-signature", "a user function whose signature does not accept the arguments given"),
    "E305": ("unknown-reward", "a reward that is neither built in nor an importable module:function"),
    "E306": ("unknown-thread", "a node continues or appends to a thread that is not declared"),
    "E307": ("unknown-state", "a node writes a state variable that is not declared"),
    "E308": ("unknown-constant", "a `$NAME` value names no constant"),
    "E309": ("no-environment", "env_step, env_reward or an `env` parameter used by a graph with no `environment:`"),
    "E310": ("completion-mode-conflict", "completion mode mixed with chat turns in a thread, or given tool schemas"),
    "E311": ("reward-untrained-node", "a node reward on a node whose tokens are not trained"),
    "E312": ("subgraph-file", "a `graph:` node's file is missing, outside the graph's folder, or not a file"),
    "E313": ("subgraph-recursion", "a sub-graph file includes itself, directly or through other sub-graphs"),
    "E314": ("subgraph-inputs", "a `graph:` node maps an input the child does not declare, or misses a required one"),
    "E315": ("subgraph-section", "a sub-graph file declares what only the top graph may (reward, limits, ...)"),
    "E316": ("parallel-branch", "a `parallel:` branch that is not a plain one-visit node of that fork only"),
    "E317": ("parallel-thread", "two branches of one `parallel:` fork continue the same thread"),
    "E320": (
        "thread-overflow-policy",
        "on_overflow: summarize without summarize: or max_tokens:, or summarize: with on_overflow: truncate",
    ),
    "E321": ("trained-frozen-summary", "summarize: train: true with a model other than the policy"),
    "E401": ("trained-frozen-model", "a trained node runs on a frozen (non-policy) model"),
    "W402": ("no-trained-node", "no node is trained: the graph produces no training signal"),
    "E403": ("fanout-incompatible", "a fan-out graph combined with slime settings that break it"),
    "W404": ("context-overflow", "the worst-case token count can exceed the declared context length"),
    "W405": ("untrained-policy-sample", "a policy node enters a training sample with no trained tokens"),
    "W406": ("history-rewrite", "a thread is re-rendered with a chat template that rewrites earlier turns"),
    "E407": ("teacher-is-policy", "slime.teacher names the policy: it would distil the trained model into itself"),
}


@dataclass(frozen=True, order=True)
class Span:
    """A location in a source file (1-based line and column; end is exclusive, same line)."""

    file: str
    line: int
    col: int
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    span: Span | None = None
    hint: str | None = None

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown diagnostic code {self.code}")

    @property
    def severity(self) -> str:
        return "warning" if self.code.startswith("W") else "error"

    @property
    def name(self) -> str:
        return CODES[self.code][0]

    def sort_key(self) -> tuple:
        s = self.span
        return (s.file, s.line, s.col, self.code, self.message) if s else ("", 0, 0, self.code, self.message)

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "message": self.message,
            "file": self.span.file if self.span else None,
            "line": self.span.line if self.span else None,
            "col": self.span.col if self.span else None,
            "hint": self.hint,
        }

    def render(self, sources: SourceCache | None = None) -> str:
        where = f"{self.span}: " if self.span else ""
        out = [f"{where}{self.severity}[{self.code}]: {self.message}"]
        if self.span and sources is not None:
            text = sources.line(self.span.file, self.span.line)
            if text is not None:
                gutter = str(self.span.line)
                pad = " " * len(gutter)
                width = max(1, (self.span.end_col or self.span.col + 1) - self.span.col)
                out.append(f" {gutter} | {text}")
                out.append(f" {pad} | {' ' * (self.span.col - 1)}{'^' * width}")
        if self.hint:
            out.append(f"   = help: {self.hint}")
        return "\n".join(out)


class SourceCache:
    """Reads source lines for rendering; files that cannot be read render without a snippet."""

    def __init__(self) -> None:
        self._lines: dict[str, list[str] | None] = {}

    def add(self, file: str, text: str) -> None:
        self._lines[file] = text.splitlines()

    def line(self, file: str, line: int) -> str | None:
        if file not in self._lines:
            try:
                self._lines[file] = Path(file).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                self._lines[file] = None
        lines = self._lines[file]
        if lines is None or not (1 <= line <= len(lines)):
            return None
        return lines[line - 1].expandtabs(1)


class DiagnosticError(Exception):
    """Raised by a stage that cannot go on; carries every diagnostic found so far."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(d.render() for d in self.diagnostics))


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """A 'did you mean' hint for a misspelt name, or None when nothing is close."""
    matches = difflib.get_close_matches(str(word), sorted(set(map(str, candidates))), n=1, cutoff=0.6)
    return f"did you mean '{matches[0]}'?" if matches else None


def did_you_mean_file(written: str, names: Iterable[str]) -> str | None:
    """A did-you-mean for a misspelt file path: the closest of the file `names` in its folder,
    written as a path the way the user wrote theirs (folder kept), or None when nothing is close."""
    folder, _, name = str(written).rpartition("/")
    matches = difflib.get_close_matches(name, sorted(set(names)), n=1, cutoff=0.6)
    if not matches:
        return None
    return f"did you mean '{folder + '/' if folder else ''}{matches[0]}'?"


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple] = set()
    out = []
    for d in sorted(diagnostics, key=Diagnostic.sort_key):
        key = (d.code, d.message, d.span)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
