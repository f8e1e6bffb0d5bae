"""The graphs under benchmark: the bundled graphs, with the few lines a benchmark must change.

Input: graphs/memagent.yaml, graphs/toolorchestra.yaml (read as text). Output: variant YAML files
in a build directory, compiled with the real CLI command (`graphrl compile GRAPH -o DIR`), and the
path of the generated module slime would import.

Changes (each an exact, asserted one-line substitution; nothing else differs from the bundled graph):
  all            `templates:` made absolute (the variant lives elsewhere)
  memagent       `chunk_tokens: 5000` -> N for the scaling runs (512 chunks stay cheap), renamed
  toolorchestra  `sample: call` -> `sample: thread` (one multi-turn sample, tool tokens masked: the
                 layout of the hand-written baselines, which the graph's own comment offers); the
                 retrieval service is the simulated server's /retrieve, given per row in
                 metadata.retrieval_url (the graph's own input for it), not by editing the graph
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "graphs"


def _sub(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise RuntimeError(f"expected exactly one {old!r} in the bundled graph (it changed?)")
    return text.replace(old, new)


def memagent_yaml(out_dir: Path, chunk_tokens: int | None = None) -> Path:
    text = (BUNDLED / "memagent.yaml").read_text(encoding="utf-8")
    text = _sub(text, "templates: ../prompts/memagent", f"templates: {REPO / 'prompts' / 'memagent'}")
    name = "memagent"
    if chunk_tokens is not None:
        name = f"memagent_c{chunk_tokens}"
        text = _sub(text, "chunk_tokens: 5000", f"chunk_tokens: {chunk_tokens}")
        text = _sub(text, "name: memagent\n", f"name: {name}\n")
    path = out_dir / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def toolorchestra_yaml(out_dir: Path) -> Path:
    text = (BUNDLED / "toolorchestra.yaml").read_text(encoding="utf-8")
    text = _sub(text, "templates: ../prompts/toolorchestra", f"templates: {REPO / 'prompts' / 'toolorchestra'}")
    text = _sub(text, "    sample: call ", "    sample: thread ")
    path = out_dir / "toolorchestra.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def compile_graph(graph: Path, out_dir: Path) -> Path:
    """`graphrl compile GRAPH -o DIR` (the CLI's own command, run in this process); returns the
    generated module's path."""
    from graphrl.cli import main as cli

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            cli.main(["compile", str(graph), "-o", str(out_dir)], prog_name="graphrl", standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise RuntimeError(f"graphrl compile {graph} failed:\n{out.getvalue()}") from None
    modules = sorted(Path(out_dir).glob("graphrl_*.py"))
    if len(modules) != 1:
        raise RuntimeError(f"graphrl compile wrote {len(modules)} modules in {out_dir}")
    return modules[0]
