"""Cache directory for generated artefacts (converted tokenizers and models).

Input: the environment (`GRAPHRL_CACHE_DIR`, else `~/.cache/graphrl`).
Output: a `Path` to an existing directory (created on demand).

Invariants: nothing here is global state; every call re-reads the environment, so tests can point
the cache at a temporary directory with `monkeypatch.setenv`. Entries are written to a temporary
sibling and renamed into place (`publish_dir`), so a crashed conversion never leaves a half-written
entry that a later load would trust.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

ENV_VAR = "GRAPHRL_CACHE_DIR"


def cache_dir(*parts: str) -> Path:
    """The graphrl cache directory (or a subdirectory of it), created if missing."""
    root = os.environ.get(ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "graphrl")
    path = Path(root).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def staging_dir(final: Path) -> Path:
    """A fresh empty directory next to `final` to build an entry in before `publish_dir`."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))


def publish_dir(staging: Path, final: Path) -> Path:
    """Atomically move a completed `staging` directory to `final` (another writer may have won)."""
    try:
        os.replace(staging, final)
    except OSError:
        # `final` already exists (a concurrent build finished first): keep theirs.
        shutil.rmtree(staging, ignore_errors=True)
    return final
