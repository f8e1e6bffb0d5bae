"""Which tokenizer a run over HTTP uses: a policy server's URL -> a tokenizer name graphrl can load.

Input: the policy's SGLang URL (and the `--tokenizer` the user gave, if any).
Output: a tokenizer spec for `graphrl.models.registry.resolve_tokenizer`: the one given; else the
server's `/get_model_info` `tokenizer_path` (then `model_path`) when it is a built-in name
(`graphrl serve --model smollm2` reports `smollm2`), a local tokenizer directory, or a Qwen2/2.5/3
model id (they share the offline Qwen tokenizer); else a `UsageProblem` (exit 2) that says what the
server reported and asks for `--tokenizer`.

Invariants: one GET with a short timeout, never a download; a server that cannot be reached is a
usage error naming the URL (a run against it could not work either).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..engines.base import EngineError
from ..engines.sglang import SGLangEngine
from ..errors import UsageProblem
from ..models.registry import MODEL_NAMES, TOKENIZER_ALIASES


def tokenizer_for(candidate: str) -> str | None:
    """A reported model/tokenizer path -> a spec graphrl can load offline, or None."""
    name = candidate.strip()
    if not name:
        return None
    if name in MODEL_NAMES or name in TOKENIZER_ALIASES:
        return name
    path = Path(name).expanduser()
    if (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file():
        return str(path)
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    if base.startswith(("qwen2", "qwen3")):
        return "qwen"
    return None


def discover_tokenizer(url: str, timeout_s: float = 10.0) -> str:
    async def ask() -> dict:
        engine = SGLangEngine(url, timeout_s=timeout_s)
        try:
            return await engine.model_info()
        finally:
            await engine.close()

    try:
        info = asyncio.run(ask())
    except EngineError as exc:
        raise UsageProblem(
            f"cannot ask {url} which tokenizer it uses ({exc}); give --tokenizer "
            f"({', '.join(TOKENIZER_ALIASES[:1] + MODEL_NAMES)} or a tokenizer directory)"
        ) from None
    for key in ("tokenizer_path", "model_path"):
        spec = tokenizer_for(str(info.get(key) or ""))
        if spec is not None:
            return spec
    raise UsageProblem(
        f"{url} serves model_path={info.get('model_path')!r}, tokenizer_path="
        f"{info.get('tokenizer_path')!r}, which graphrl cannot load offline; give --tokenizer "
        f"({', '.join(TOKENIZER_ALIASES[:1] + MODEL_NAMES)} or a local tokenizer directory)"
    )
