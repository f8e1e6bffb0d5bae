"""Located YAML: text -> plain Python values plus a span for every value and key.

Input: YAML text and the file name it came from.
Output: `Located(value, spans, key_spans)` where `spans[path]` is the span of the value at `path`
(a tuple of mapping keys and list indexes) and `key_spans[path]` the span of the key that introduced
it. Parsing is PyYAML's (safe loader); this module only walks the composed node tree.

Invariants: duplicate keys are reported (E004), never silently merged; YAML syntax errors become an
E001 diagnostic at the parser's line and column; no tags beyond the safe set are constructed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .diagnostics import Diagnostic, Span

Path_ = tuple  # a path into the document: ("nodes", "plan", "prompt", 0, "user")


@dataclass
class Located:
    value: Any
    file: str
    spans: dict[Path_, Span] = field(default_factory=dict)
    key_spans: dict[Path_, Span] = field(default_factory=dict)
    block_paths: set[Path_] = field(default_factory=set)  # scalars written as | or > blocks
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def span(self, path: Path_, *, key: bool = False) -> Span | None:
        """The span at `path`, or of its nearest located ancestor."""
        path = tuple(path)
        table = self.key_spans if key else self.spans
        while True:
            if path in table:
                return table[path]
            if key and path in self.spans:
                return self.spans[path]
            if not path:
                return Span(self.file, 1, 1)
            path = path[:-1]


def _span(file: str, node: yaml.Node) -> Span:
    start, end = node.start_mark, node.end_mark
    end_col = end.column + 1 if end.line == start.line and end.column > start.column else None
    return Span(file, start.line + 1, start.column + 1, end_col)


MAX_VALUES = 100_000  # a graph has hundreds; bounds alias expansion ("billion laughs")
_COLLECTION_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


_MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_DEPTH = 200


def _merged_pairs(node: yaml.MappingNode, memo: dict[int, int]) -> int:
    """How many key/value pairs `node` has once its merge keys are expanded (without expanding them)."""
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    memo[id(node)] = MAX_VALUES + 1  # a recursive merge counts as too big
    total = 0
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            subs = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            total += sum(_merged_pairs(s, memo) for s in subs if isinstance(s, yaml.MappingNode))
        else:
            total += 1
        if total > MAX_VALUES:
            break
    memo[id(node)] = total
    return total


def _too_deep(text: str, limit: int) -> tuple[int, int] | None:
    """(line, column), 1-based, where flow brackets nest or block indentation levels pile up past
    `limit`, or None; cheaply, without parsing (brackets inside quoted text count too)."""
    depth = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        for col, ch in enumerate(line, 1):
            if ch in "[{":
                depth += 1
                if depth > limit:
                    return lineno, col
            elif ch in "]}":
                depth = max(0, depth - 1)
    indents: set[int] = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            indents.add(len(line) - len(line.lstrip(" -")))
            if len(indents) > limit:
                return lineno, 1
    return None


class _Walker:
    def __init__(self, file: str, loc: Located):
        self.file = file
        self.loc = loc
        self.constructor = yaml.SafeLoader("")  # only its constructor methods are used
        self.count = 0
        self.pair_counts: dict[int, int] = {}  # merge sizes by node
        self.merged: dict[int, dict[Any, Any]] = {}  # a merged mapping's value, built once per node

    def _merged(self, node: yaml.MappingNode, path: Path_, depth: int) -> dict[Any, Any]:
        """The value of a mapping a merge key names, walked once however often it is merged (its
        size still counts toward MAX_VALUES at every use, through `_merged_pairs`)."""
        hit = self.merged.get(id(node))
        if hit is None:
            hit = self.merged[id(node)] = self.walk(node, path + ("<<",), depth + 1)
        else:
            self.count += len(hit)
            if self.count > MAX_VALUES:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"document has more than {MAX_VALUES} values once merge keys (<<) are expanded",
                    node.start_mark,
                )
        return hit

    def walk(self, node: yaml.Node, path: Path_, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise yaml.YAMLError("document nested too deeply (or a recursive alias)")
        self.count += 1
        if self.count > MAX_VALUES:  # aliases are expanded per use: `a1: [*a0, *a0, ...]` grows exponentially
            raise yaml.constructor.ConstructorError(
                None, None, f"document has more than {MAX_VALUES} values once aliases are expanded", node.start_mark
            )
        self.loc.spans[path] = _span(self.file, node)
        if not isinstance(node, yaml.ScalarNode) and node.tag not in _COLLECTION_TAGS:
            # scalars with unknown tags fail in construct_object; collections must not pass silently
            raise yaml.constructor.ConstructorError(None, None, f"unsupported tag '{node.tag}'", node.start_mark)
        if isinstance(node, yaml.MappingNode):
            merged = _merged_pairs(node, self.pair_counts)
            if self.count + merged > MAX_VALUES:  # `<<: [*a, *a]` doubles per level: count before expanding
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"document has more than {MAX_VALUES} values once merge keys (<<) are expanded",
                    node.start_mark,
                )
            out: dict[Any, Any] = {}
            merges: list[yaml.Node] = []
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:  # YAML merge keys (<<): a mapping or a list of mappings
                    subs = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                    for sub in subs:
                        if not isinstance(sub, yaml.MappingNode):
                            raise yaml.constructor.ConstructorError(
                                None, None, "a merge key (<<) takes a mapping or a list of mappings", sub.start_mark
                            )
                    merges.extend(subs)
                    continue
                key = self.constructor.construct_object(key_node, deep=True)
                if isinstance(key, (list, dict)):
                    key = str(key)
                elif isinstance(key, bool) and key_node.value.lower() not in ("true", "false"):
                    # YAML 1.1 reads yes/no/on/off keys as booleans; in a graph a key is a name
                    # (a switch case compared with text), so keep what was written
                    key = key_node.value
                kpath = path + (key,)
                if key in out:
                    code = "E005" if path == ("nodes",) else "E004"
                    what = f"node id '{key}'" if code == "E005" else f"key '{key}'"
                    first = self.loc.key_spans.get(kpath)
                    self.loc.diagnostics.append(
                        Diagnostic(
                            code,
                            f"duplicate {what}" + (f" (first defined at line {first.line})" if first else ""),
                            _span(self.file, key_node),
                            "each key may appear once per mapping; remove or rename one of them",
                        )
                    )
                    continue
                self.loc.key_spans[kpath] = _span(self.file, key_node)
                out[key] = self.walk(value_node, kpath, depth + 1)
            if not merges:
                return out
            # merged keys come first; an explicit key overrides them, an earlier merge a later one
            base: dict[Any, Any] = {}
            for sub in merges:
                for k, v in self._merged(sub, path, depth).items():
                    base.setdefault(k, v)
            return {**base, **out}
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
            self.loc.block_paths.add(path)
        return self.constructor.construct_object(node, deep=True)


def load_yaml(text: str, file: str) -> Located:
    """Parse one YAML document with spans. Syntax errors are returned as diagnostics, not raised."""
    loc = Located(value=None, file=file)
    deep = _too_deep(text, MAX_DEPTH)
    if deep is not None:  # PyYAML composes recursively: refuse before it overflows the stack
        loc.diagnostics.append(
            Diagnostic(
                "E001",
                f"YAML nested more than {MAX_DEPTH} levels deep",
                Span(file, *deep),
                "a graph is a few levels deep: check for runaway brackets or indentation",
            )
        )
        return loc
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        span = Span(file, mark.line + 1, mark.column + 1) if mark else Span(file, 1, 1)
        msg = " ".join(str(p) for p in (exc.context, exc.problem) if p) or "invalid YAML"
        loc.diagnostics.append(
            Diagnostic(
                "E001", f"YAML syntax error: {msg}", span, "check indentation, colons and quoting around this point"
            )
        )
        return loc
    except yaml.YAMLError as exc:
        loc.diagnostics.append(Diagnostic("E001", f"YAML error: {exc}", Span(file, 1, 1)))
        return loc
    except RecursionError:  # a nesting the cheap scan above did not see
        loc.diagnostics.append(Diagnostic("E001", "YAML nested too deeply to parse", Span(file, 1, 1)))
        return loc
    docs = [d for d in docs if d is not None]
    if len(docs) > 1:
        loc.diagnostics.append(
            Diagnostic(
                "E001",
                "a graph file holds one YAML document, found several",
                _span(file, docs[1]),
                "remove the extra '---' separator",
            )
        )
    if not docs:
        loc.value = {}
        return loc
    try:
        loc.value = _Walker(file, loc).walk(docs[0], ())
    except yaml.MarkedYAMLError as exc:  # e.g. a tag outside the safe set
        mark = exc.problem_mark or exc.context_mark
        span = Span(file, mark.line + 1, mark.column + 1) if mark else Span(file, 1, 1)
        msg = " ".join(str(p) for p in (exc.context, exc.problem) if p) or "invalid YAML"
        loc.diagnostics.append(Diagnostic("E001", f"YAML error: {msg}", span))
    except yaml.YAMLError as exc:
        loc.diagnostics.append(Diagnostic("E001", f"YAML error: {exc}", Span(file, 1, 1)))
    except RecursionError:
        loc.diagnostics.append(Diagnostic("E001", "YAML nested too deeply to parse", Span(file, 1, 1)))
    return loc
