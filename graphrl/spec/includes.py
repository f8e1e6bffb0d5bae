"""YAML includes: `include: [shared/tools.yaml, ...]` merges the sections of other YAML files into a
graph, before anything else reads it.

Input: the graph's located tree (`Located`, from `yamlsrc.load_yaml`), the graph file's directory.
Output: the same tree with every included file's sections merged in, their spans kept (so a
diagnostic about an included value is located in the included file, at its own line and column),
the `include` key removed, and the diagnostics of the merge; plus the files read, in order.

Rules: an include names one path or a list of paths, relative to the file that holds it; included
files may include others. Keyed sections (`constants`, `models`, `inputs`, `state`, `threads`,
`nodes`) merge key by key, the including file's keys first, then each include's in order; whole
sections (`reward`, `environment`, `limits`) are taken from the one file that has them. A key (or
a whole section) defined twice is E009, located at the second definition, naming the first.
Included files are confined to the graph file's folder (symlinks resolved) unless the graph says
`templates_outside: true`; a missing, unreadable, oversized or non-mapping file, a section that
cannot be included, an include cycle and nesting past MAX_INCLUDE_DEPTH are E008 at the include
entry (or, inside an included file, at the offending key). A file included twice by different
paths of the tree is merged once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .diagnostics import Diagnostic, did_you_mean_file
from .template_files import FileRefused, FileRules, read_confined
from .yamlsrc import Located, load_yaml

KEYED = ("constants", "models", "inputs", "state", "threads", "nodes")
WHOLE = ("reward", "environment", "limits")
NOUN = {"constants": "constant", "models": "model", "inputs": "input", "state": "state variable", "threads": "thread"}
NOUN["nodes"] = "node"
MAX_INCLUDE_DEPTH = 8
MAX_INCLUDE_BYTES = 1 << 20


INCLUDED_FILES = FileRules(
    "included file",
    "graph's folder",
    "keep shared YAML files under the graph file's folder, or set templates_outside: true",
    "point at a .yaml file",
    MAX_INCLUDE_BYTES,
    "split it",
)


def _read(path: Path, root: Path, *, outside_ok: bool, written: str) -> str:
    try:
        data = read_confined(path, root, INCLUDED_FILES, outside_ok=outside_ok)
    except FileNotFoundError:
        near = sorted(p.name for p in path.parent.glob("*.y*ml")) if path.parent.is_dir() else []
        raise FileRefused(
            f"included file not found: {path}",
            did_you_mean_file(written, near) or "include paths are relative to the file that holds the include",
        ) from None
    except OSError as exc:
        raise FileRefused(f"cannot read included file {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"included file {path} is not UTF-8 text ({exc.reason})") from None


class _Merger:
    def __init__(self, loc: Located, root: Path, outside_ok: bool):
        self.loc = loc
        self.root = root
        self.outside_ok = outside_ok
        self.diags: list[Diagnostic] = []
        self.files: list[str] = []
        self.done: set[Path] = set()
        self.doc: dict[Any, Any] = {k: v for k, v in loc.value.items() if k != "include"}
        # where each merged key was first defined: (section, key) or (section,) -> its key span
        self.first: dict[tuple, Any] = {}
        for section in KEYED:
            if isinstance(self.doc.get(section), dict):
                for k in self.doc[section]:
                    self.first[(section, k)] = loc.span((section, k), key=True)
        for section in WHOLE:
            if section in self.doc:
                self.first[(section,)] = loc.span((section,), key=True)

    def entries(self, src: Located, base: Path) -> list[tuple[Path, tuple]]:
        """The include entries of one file: (path, located path of the entry)."""
        value = src.value.get("include")
        if value is None:
            return []
        items: list[tuple[Any, tuple]] | None = [(value, ("include",))] if isinstance(value, str) else None
        if items is None and isinstance(value, list):
            items = [(v, ("include", i)) for i, v in enumerate(value)]
        if items is None or not all(isinstance(v, str) and v.strip() for v, _ in items):
            self.diags.append(
                Diagnostic(
                    "E008",
                    "include: takes a file path or a list of file paths",
                    src.span(("include",)),
                    "e.g. include: [shared/tools.yaml]",
                )
            )
            return []
        return [(base / v, p) for v, p in items]

    def run(self, src: Located, base: Path, chain: tuple[Path, ...]) -> None:
        for path, where in self.entries(src, base):
            span = src.span(where)
            real = path.resolve()
            if real in chain:
                names = " -> ".join(p.name for p in (*chain, real))
                self.diags.append(
                    Diagnostic("E008", f"include cycle: {names}", span, "remove the include that leads back")
                )
                continue
            if real in self.done:
                continue
            if len(chain) > MAX_INCLUDE_DEPTH:
                self.diags.append(
                    Diagnostic(
                        "E008", f"includes nested more than {MAX_INCLUDE_DEPTH} levels deep", span, "flatten them"
                    )
                )
                continue
            try:
                written = Path(os.path.relpath(path, base)).as_posix()
                text = _read(path, self.root, outside_ok=self.outside_ok, written=written)
            except FileRefused as exc:
                self.diags.append(Diagnostic("E008", str(exc), span, exc.hint))
                continue
            self.done.add(real)
            self.files.append(str(path))
            inc = load_yaml(text, str(path))
            self.diags += inc.diagnostics
            if any(d.code == "E001" for d in inc.diagnostics):
                continue
            if inc.value in (None, {}):
                continue
            if not isinstance(inc.value, dict):
                self.diags.append(
                    Diagnostic("E008", f"included file {path} is not a mapping of graph sections", inc.span(()))
                )
                continue
            self.merge(inc)
            self.run(inc, path.parent, (*chain, real))

    def merge(self, inc: Located) -> None:
        for section, value in inc.value.items():
            if section == "include":
                continue
            kspan = inc.span((section,), key=True)
            if section in KEYED:
                if not isinstance(value, dict):
                    self.diags.append(
                        Diagnostic("E003", f"{section}: must be a mapping", inc.span((section,)), "name: value pairs")
                    )
                    continue
                target = self.doc.setdefault(section, {})
                if not isinstance(target, dict):
                    continue  # the graph's own section has the wrong type: reported there
                for k, v in value.items():
                    if self._defined_twice((section, k), inc, f"{NOUN[section]} '{k}'"):
                        continue
                    target[k] = v
                    self._take_spans(inc, (section, k))
                vspan = inc.span((section,))
                if (section,) not in self.loc.key_spans and kspan is not None and vspan is not None:
                    self.loc.key_spans[(section,)] = kspan  # a section only an include has
                    self.loc.spans.setdefault((section,), vspan)
            elif section in WHOLE:
                if self._defined_twice((section,), inc, f"section '{section}'"):
                    continue
                self.doc[section] = value
                self._take_spans(inc, (section,))
            else:
                self.diags.append(
                    Diagnostic(
                        "E008",
                        f"'{section}' cannot be included: it belongs to the graph file",
                        kspan,
                        f"an included file holds {', '.join(KEYED + WHOLE)} (and include)",
                    )
                )

    def _defined_twice(self, key: tuple, inc: Located, what: str) -> bool:
        first = self.first.get(key)
        if first is None:
            self.first[key] = inc.span(key, key=True)
            return False
        self.diags.append(
            Diagnostic(
                "E009",
                f"{what} is defined twice: first at {first}",
                inc.span(key, key=True),
                "each name is defined once across a graph and its includes: rename or remove one",
            )
        )
        return True

    def _take_spans(self, inc: Located, prefix: tuple) -> None:
        n = len(prefix)
        for table, mine in ((inc.spans, self.loc.spans), (inc.key_spans, self.loc.key_spans)):
            for path, span in table.items():
                if path[:n] == prefix:
                    mine[path] = span
        self.loc.block_paths |= {p for p in inc.block_paths if p[:n] == prefix}


def expand_includes(loc: Located, graph_dir: Path) -> tuple[list[Diagnostic], list[str]]:
    """Merge the files `loc`'s `include:` names into `loc.value` (in place); (diagnostics, files read)."""
    if not isinstance(loc.value, dict) or "include" not in loc.value:
        return [], []
    outside_ok = loc.value.get("templates_outside") is True
    merger = _Merger(loc, graph_dir.resolve(), outside_ok)
    merger.run(loc, graph_dir, (Path(loc.file).resolve(),))
    loc.value = merger.doc
    for table in (loc.spans, loc.key_spans):  # the include entries are not part of the merged graph
        for path in [p for p in table if p[:1] == ("include",)]:
            del table[path]
    return merger.diags, merger.files
