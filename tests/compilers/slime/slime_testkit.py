"""Helpers for the slime target's tests (imported by conftest.py and the test modules).

`SlimeKit` compiles a fixture graph (tests/compilers/slime/graphs) into a tmp dir and builds a
`SlimeTarget` whose engines are scripted (by model name) and whose tokenizer is the real Qwen one.
Scripts are callables (decoded prompt, call index) -> reply: a text (sampled ids = its ids +
<|im_end|>), or (text, "length"|"abort") for a cut or aborted reply.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.abc
import importlib.machinery
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from graphrl.compilers.lower import plan_from_path
from graphrl.compilers.slime.adapter import SlimeTarget
from graphrl.compilers.slime.emit import module_name, write_slime_target
from graphrl.engines.base import FinishReason
from graphrl.engines.scripted import Scripted, ScriptedEngineForTests
from graphrl.runtime.chat import ChatRenderer

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
GRAPHS = HERE / "graphs"
IM_END = 151645
LOGPROB = -0.5

sys.path[:0] = [str(HERE), str(GRAPHS)]  # slime_standin; slime_tools (the graphs' user tool)


class SlimeKit:
    def __init__(self, tmp_path: Path, tok: Any):
        self.tmp = tmp_path
        self.tok = tok
        self.r = ChatRenderer(tok)

    def compile(self, graph: str | Path, out: str = "out") -> Path:
        path = Path(graph)
        if not path.suffix:
            path = GRAPHS / f"{graph}.yaml"
        plan, diags = plan_from_path(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
        assert plan is not None, "\n".join(str(d) for d in diags)
        out_dir = self.tmp / out
        write_slime_target(plan, out_dir)
        self.plan = plan
        self.out = out_dir
        return out_dir

    def reply(self, item: Any) -> Scripted:
        text, finish = (item, None) if isinstance(item, str) else item
        ids = tuple(self.r.encode(text)) + ((IM_END,) if finish is None else ())
        reason = {
            None: FinishReason("stop", matched=IM_END),
            "length": FinishReason("length", matched=len(ids)),
            "abort": FinishReason("abort", message="aborted for the test"),
        }[finish]
        return Scripted(
            output_ids=ids,
            logprobs=tuple(LOGPROB - 0.01 * i for i in range(len(ids))),
            finish_reason=reason,
            cached_tokens=3,
        )

    def engine(self, script: Callable[[str, int], Any] | list) -> ScriptedEngineForTests:
        if isinstance(script, list):
            items = list(script)
            script_fn = lambda prompt, i: items[i]
        else:
            script_fn = script
        return ScriptedEngineForTests(
            lambda ids, params, i: self.reply(script_fn(self.r.decode(ids), i)),
            tokenizer=self.tok,
            default_logprob=LOGPROB,
        )

    def target(self, engines: dict[str, Any]) -> SlimeTarget:
        return SlimeTarget(
            self.out / "plan.json",
            engine_factory=lambda name, url, cfg: engines[name],
            tokenizer_loader=lambda path: self.tok,
        )

    def module_name(self) -> str:
        return module_name(self.plan)

    def run(
        self, target: SlimeTarget, sample: Any, args: Any, sampling: dict | None = None, evaluation: bool = False
    ) -> Any:
        params = sampling if sampling is not None else default_sampling()
        return asyncio.run(target.generate(args, sample, params, evaluation=evaluation))


def default_sampling() -> dict[str, Any]:
    """What slime's GenerateState sends (docs/architecture.md, slime contract §1), per sample."""
    return {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "max_new_tokens": 1024,
        "stop": None,
        "stop_token_ids": None,
        "skip_special_tokens": False,
        "no_stop_trim": True,
        "spaces_between_special_tokens": False,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes `sglang`, `sglang_router` and `wandb` (and their submodules) importable as stubs."""

    ROOTS = ("sglang", "sglang_router", "wandb")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        stub = mock.MagicMock(name=spec.name)
        stub.__path__, stub.__spec__ = [], spec
        return stub

    def exec_module(self, module):
        pass


_STUBS = _StubFinder()


def import_stubbed(module: str) -> Any:
    """Import a slime module that imports sglang / wandb, which the code under test does not use:
    where sglang is not installed, those are stubbed (for the rest of the session: the stub modules
    stay in sys.modules anyway); skip if the import still fails."""
    import pytest

    if _STUBS not in sys.meta_path:
        try:
            import sglang  # noqa: F401
        except ImportError:
            sys.meta_path.insert(0, _STUBS)
    try:
        return importlib.import_module(module)
    except Exception as exc:
        pytest.skip(f"{module} is not importable here: {type(exc).__name__}: {exc}")
