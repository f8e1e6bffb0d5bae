"""The package's shape: no import cycles, the layers of docs/architecture.md, nothing cites files
outside the repository. (`make test` also runs `lint-imports`, `ruff` and `mypy`.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[1]
grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")


def _import_graph() -> nx.DiGraph:
    g = grimp.build_graph("graphrl")  # every import, those inside functions included
    out = nx.DiGraph()
    for module in g.modules:
        out.add_node(module)
        for dep in g.find_modules_directly_imported_by(module):
            out.add_edge(module, dep)
    return out


def test_no_import_cycles_between_modules():
    cycles = list(nx.simple_cycles(_import_graph()))
    assert cycles == [], f"{len(cycles)} import cycle(s), e.g. {' -> '.join(cycles[0])}"


def test_no_library_module_imports_the_cli():
    graph = _import_graph()
    offenders = sorted(
        m
        for m in graph
        if not m.startswith("graphrl.cli")
        and m != "graphrl.__main__"
        and any(d == "graphrl.cli" or d.startswith("graphrl.cli.") for d in graph.successors(m))
    )
    assert offenders == []


def test_import_linter_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if exe is None:
        pytest.skip("lint-imports is not installed (pip install -e '.[dev]')")
    r = subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "0 broken" in r.stdout


def test_the_project_cites_only_documents_inside_it():
    pattern = re.compile(r"DESIGN\.md|slime-contract\.md|seed-workflows\.md|\.\./shared")
    hits = []
    for path in [
        *REPO.glob("graphrl/**/*.py"),
        *REPO.glob("docs/**/*.md"),
        *REPO.glob("benchmarks/**/*.py"),
        REPO / "README.md",
    ]:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert hits == [], "\n".join(hits)


def test_the_light_paths_import_no_heavy_dependency():
    """`graphrl run --engine sglang`, the slime adapter and the viewer need neither torch nor transformers."""
    code = (
        "import sys, graphrl.cli, graphrl.cli.run, graphrl.app.run, graphrl.compilers.slime.adapter, "
        "graphrl.viz.build, graphrl.cli.visualize\n"
        "print(sorted(m for m in ('torch', 'transformers', 'numpy', 'bm25s') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
