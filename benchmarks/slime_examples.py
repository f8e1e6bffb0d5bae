"""slime's own example generate functions, imported unmodified from a slime checkout given at run time.

Input: the root of a THUDM/slime source tree (`--slime DIR`: `slime/` and `examples/` inside). Output:
`load(root)` -> the example modules `generate_with_search` (examples/search-r1) and
`generate_with_retool` (examples/retool), imported from that tree as slime's launcher imports them
(the example directory on sys.path), with slime's real `Sample`, `GenerateState` and `post`.

Nothing of slime is copied into this project. Where a module their imports reach is not installed
here (sglang, sglang_router, wandb, ray, PIL, pylatexenc: the GPU server, the cluster, logging,
images, LaTeX -- none of them on the path these generate functions run), an empty stand-in module
is importable instead, as tests/compilers/slime does; installed ones are the real ones. The
transport is slime's own (`slime.utils.http_utils.post`, httpx) and so is ReTool's code executor
(`tool_sandbox`: a `python3` subprocess per code block, psutil for its memory checks), so httpx and
psutil must be installed (`pip install -e '.[peers]'`).

Configuration, as a user of the examples sets it (their module-level config dicts and slime's
args): `configure_search_r1(url, max_turns, topk)` points Search-R1's local search backend at a
retrieval service; `prepare(args, tokenizer)` gives slime's `GenerateState` this process's
tokenizer (the harness's timed one), no multimodal processor (a text model), and opens slime's
HTTP client the way slime's rollout manager does (`init_http_client`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

EXAMPLES = {"search_r1": ("search-r1", "generate_with_search"), "retool": ("retool", "generate_with_retool")}
OPTIONAL = ("sglang", "sglang_router", "wandb", "ray", "PIL", "pylatexenc")
REQUIRED = ("httpx", "psutil", "torch", "numpy", "jinja2", "transformers")


class SlimeUnavailable(RuntimeError):
    """No usable slime checkout at the given path, or a dependency of the examples is missing."""


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes the missing OPTIONAL packages (and their submodules) importable as stand-in modules."""

    def __init__(self, roots: tuple[str, ...]):
        self.roots = roots

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        stub = mock.MagicMock(name=spec.name)
        stub.__path__, stub.__spec__ = [], spec
        return stub

    def exec_module(self, module):
        pass


def check(root: Path | str | None) -> Path:
    """The slime root, or SlimeUnavailable saying why not."""
    if root is None:
        raise SlimeUnavailable("no slime checkout given (--slime DIR)")
    root = Path(root).resolve()
    for sub, mod in EXAMPLES.values():
        if not (root / "examples" / sub / f"{mod}.py").is_file():
            raise SlimeUnavailable(f"{root}: no examples/{sub}/{mod}.py (not a THUDM/slime checkout?)")
    if not (root / "slime" / "utils" / "types.py").is_file():
        raise SlimeUnavailable(f"{root}: no slime/utils/types.py")
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        raise SlimeUnavailable(f"slime's examples need {', '.join(missing)}: pip install -e '.[peers]'")
    return root


def load(root: Path | str | None) -> dict[str, ModuleType]:
    """Import both example modules from `root` (see the module doc); workflow -> module."""
    root = check(root)
    absent = tuple(m for m in OPTIONAL if importlib.util.find_spec(m) is None)
    if absent and not any(isinstance(f, _StandIns) for f in sys.meta_path):
        sys.meta_path.insert(0, _StandIns(absent))
    for path in [root] + [root / "examples" / sub for sub, _ in EXAMPLES.values()]:
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    import slime

    if Path(slime.__file__).resolve().parents[1] != root:
        raise SlimeUnavailable(f"'slime' imports from {slime.__file__}, not from {root}")
    try:
        return {wf: importlib.import_module(mod) for wf, (_, mod) in EXAMPLES.items()}
    except Exception as exc:  # an import error inside slime's tree: say which, no traceback
        raise SlimeUnavailable(f"importing slime's examples from {root} failed: {type(exc).__name__}: {exc}") from exc


def configure_search_r1(module: ModuleType, url: str, *, max_turns: int, topk: int) -> None:
    """Search-R1's own config dict: the local backend at `url`, the graph's turn and topk limits."""
    cfg = module.SEARCH_R1_CONFIGS
    cfg["search_backend"] = "local"
    cfg["local"]["search_url"] = url
    cfg["max_turns"] = max_turns
    cfg["topk"] = topk
    cfg["return_logprob"] = True


def prepare(args: Any, tokenizer: Any) -> None:
    """slime's rollout-process set-up the examples rely on (see the module doc)."""
    from slime.rollout import sglang_rollout
    from slime.utils import http_utils

    sglang_rollout.load_tokenizer = lambda *a, **k: tokenizer
    sglang_rollout.load_processor = lambda *a, **k: None
    sglang_rollout.GenerateState.clear_instances()
    http_utils._http_client = None
    http_utils.init_http_client(args)


async def close() -> None:
    from slime.utils import http_utils

    if http_utils._http_client is not None:
        await http_utils._http_client.aclose()
        http_utils._http_client = None


def dataset(path: Path, tokenizer: Any, *, label_key: str) -> list[Any]:
    """slime's own data loader over a JSONL file, as `--input-key prompt --label-key KEY
    --apply-chat-template` (both examples' run scripts) configure it: slime `Sample`s."""
    from slime.utils.data import Dataset

    return list(
        Dataset(str(path), tokenizer, None, None, prompt_key="prompt", label_key=label_key, apply_chat_template=True)
    )
