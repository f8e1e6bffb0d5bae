"""Prompt template files: path -> text, confined to the graph's templates folder, with includes expanded.

Input: a template file path, the templates folder (resolved), whether files outside it are allowed.
Output: the file's text, every `{% include "name.j2" %}` replaced by the named file's text (a
name relative to the templates folder, read under the same rules, recursively), so a template is
self-contained from check time on (the plan inlines it; nothing is read at run time).

Invariants: only includes of a constant file name are expanded; `{% import %}`, `{% from %}`,
`{% extends %}` and an include of an expression are refused (`TemplateRefused`, shown as E007),
as are include cycles and more than MAX_INCLUDE_DEPTH levels. Whitespace control (`{%- include
... -%}`) strips as Jinja does.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_INCLUDE_DEPTH = 8
_INCLUDE = re.compile(r"(\s*)\{%(-?)\s*include\s+(['\"])([^'\"]+)\3\s*(-?)%\}(\s*)")
_UNSUPPORTED = re.compile(r"\{%-?\s*(import|from|extends|include)\b")


MAX_TEMPLATE_BYTES = 1 << 20  # a prompt template larger than 1 MiB is refused


class FileRefused(Exception):
    """A file graphrl will not read (outside its folder, not a regular file, too large, a bad include)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


TemplateRefused = FileRefused  # what a template file's refusal is called where it is shown (E007)


@dataclass(frozen=True)
class FileRules:
    """How a kind of graph-side file is named in messages, and its size bound."""

    what: str  # "template file"
    folder: str  # "templates folder"
    outside_hint: str
    regular_hint: str
    max_bytes: int
    big_hint: str


def read_confined(path: Path, root: Path, rules: FileRules, *, outside_ok: bool) -> bytes:
    """The bytes of a file below `root` (symlinks resolved) unless `outside_ok`, a regular file, at
    most `rules.max_bytes`; `FileRefused` otherwise. A missing or unreadable file raises OSError (the
    caller says which name it was given)."""
    real = path.resolve()
    if not outside_ok and not real.is_relative_to(root):
        raise FileRefused(
            f"{rules.what} {path} is outside the {rules.folder} {root}"
            + (f" (it resolves to {real})" if real != path.absolute() else ""),
            rules.outside_hint,
        )
    if not stat.S_ISREG(real.stat().st_mode):
        raise FileRefused(f"{rules.what} {path} is not a regular file", rules.regular_hint)
    with open(real, "rb") as fh:
        data = fh.read(rules.max_bytes + 1)
    if len(data) > rules.max_bytes:
        raise FileRefused(f"{rules.what} {path} is larger than {rules.max_bytes} bytes", rules.big_hint)
    return data


TEMPLATE_FILES = FileRules(
    "template file",
    "templates folder",
    "keep prompt files under the graph's templates: folder, or set templates_outside: true",
    "point at a .j2 text file",
    MAX_TEMPLATE_BYTES,
    "a prompt template is text you wrote: split it, or pass large text in as data",
)


def _read_file(tfile: Path, root: Path, *, outside_ok: bool) -> str:
    """The text of a template file (`read_confined` under TEMPLATE_FILES: the graph's templates folder
    unless `templates_outside: true`)."""
    return read_confined(tfile, root, TEMPLATE_FILES, outside_ok=outside_ok).decode("utf-8")


def read_template(tfile: Path, root: Path, *, outside_ok: bool, _seen: tuple[Path, ...] = ()) -> str:
    """The template's text with its includes expanded (see the module docstring)."""
    real = tfile.resolve()
    if real in _seen:
        chain = " -> ".join(p.name for p in (*_seen, real))
        raise TemplateRefused(f"template include cycle: {chain}", "remove the include that leads back")
    if len(_seen) > MAX_INCLUDE_DEPTH:
        raise TemplateRefused(
            f"templates included more than {MAX_INCLUDE_DEPTH} levels deep at {tfile}", "flatten the includes"
        )
    text = _read_file(tfile, root, outside_ok=outside_ok)
    seen = (*_seen, real)

    def expand(m: re.Match[str]) -> str:
        before, strip_left, name, strip_right, after = m.group(1), m.group(2), m.group(4), m.group(5), m.group(6)
        try:
            inner = read_template(root / name, root, outside_ok=outside_ok, _seen=seen)
        except (OSError, UnicodeDecodeError) as exc:
            line = text.count("\n", 0, m.start(3)) + 1
            why = "not found" if isinstance(exc, FileNotFoundError) else f"unreadable ({exc})"
            near = sorted(p.name for p in root.glob("*.j2")) if root.is_dir() else []
            raise TemplateRefused(
                f"{tfile}:{line}: included template {name!r} {why} (include names are relative to {root})",
                f"files there: {', '.join(near[:8])}" if near else f"create {root / name}",
            ) from None
        return ("" if strip_left else before) + inner + ("" if strip_right else after)

    text = _INCLUDE.sub(expand, text)
    bad = _UNSUPPORTED.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise TemplateRefused(
            f"{tfile}:{line}: '{{% {bad.group(1)} %}}' of this kind is not supported in graph templates",
            'only {% include "file.j2" %} with a file name (relative to the templates folder) is expanded; '
            "use it, or put the shared text in a constant",
        )
    return text
