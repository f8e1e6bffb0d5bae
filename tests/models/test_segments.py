"""SegmentMemo: whole-prompt tokenisation with pieces between added tokens memoised, checked against
`tokenizers` itself on the real Qwen tokenizer; and the tokenizers it must refuse."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, trainers

from graphrl.models.segments import SegmentMemo, cuts_at_lines, exact_in_pieces, tokenizer_config
from graphrl.runtime.chat import ChatRenderer


def _ref(backend, text):
    return backend.encode(text, add_special_tokens=False).ids


class CountingBackend:
    """Test double around a real backend: counts the characters it is asked to tokenise."""

    def __init__(self, inner):
        self.inner, self.chars, self.calls = inner, 0, 0

    def encode(self, text, add_special_tokens=False):
        self.chars, self.calls = self.chars + len(text), self.calls + 1
        return self.inner.encode(text, add_special_tokens=add_special_tokens)


# Pieces chosen to sit on the tokenizer's edges: whitespace runs either side of a special token,
# combining characters and characters NFC composes, surrogate-free astral characters, digits,
# contractions, and text that merges with a neighbour when written without the token between.
FRAGMENTS = [
    " ",
    "  ",
    "\n",
    "\n\n",
    " \n ",
    "\t",
    "e\u0301",
    "\u0301",
    "Å",
    "A\u030a",
    "😀",
    "世界",
    "123",
    "'s",
    "'ll",
    "hello",
    " world",
    '{"name": 1}',
    "<|im_start",
    "|>",
    "<",
    "im_end",
    "You are a careful assistant. Answer briefly and cite the passage you used.\n",
]


def _texts(tok):
    added = sorted({t.content for t in tok.backend_tokenizer.get_added_tokens_decoder().values()})
    atoms = st.sampled_from(FRAGMENTS + added + ["system\n" + "Use the tools below. " * 5])
    return st.lists(atoms, min_size=0, max_size=24).map("".join)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_pieces_tokenise_exactly_as_the_whole_text(tok, data):
    """Whatever is memoised, seen once or twice, or tokenised in runs around it: the same ids as
    `tokenizers` on the whole text. min_chars 1 splits at every added token."""
    backend = tok.backend_tokenizer
    memo = SegmentMemo.for_tokenizer(tok, min_chars=1, max_pieces=8)
    big = SegmentMemo.for_tokenizer(tok)
    assert memo is not None and big is not None
    texts = data.draw(st.lists(_texts(tok), min_size=1, max_size=6))
    for text in texts * 3:  # every piece is seen at least three times: first sight, memoised, hit
        ref = _ref(backend, text)
        assert memo.encode(text) == ref, text
        assert big.encode(text) == ref, text


def test_a_repeated_system_prompt_is_tokenised_once(tok):
    system = (
        "<|im_start|>system\n" + "You are an orchestrator. Delegate every step to an expert.\n" * 20 + "<|im_end|>\n"
    )
    memo = SegmentMemo.for_tokenizer(tok)
    assert memo is not None
    counting = CountingBackend(tok.backend_tokenizer)
    memo._backend = counting
    prompts = [
        system + f"<|im_start|>user\nQuestion {i}: what is {i} + {i}?<|im_end|>\n<|im_start|>assistant\n"
        for i in range(6)
    ]
    for p in prompts:
        assert memo.encode(p) == _ref(tok.backend_tokenizer, p)
    # first sight whole, second sight the piece once more (memoised), then only the rest
    tail = sum(len(p) - len(system) + len("<|im_end|>\n") for p in prompts[2:])
    assert counting.chars < 2 * len(prompts[0]) + len(prompts[1]) + tail
    before = counting.chars
    assert memo.encode(prompts[3]) == _ref(tok.backend_tokenizer, prompts[3])
    assert counting.chars - before < len(prompts[3]) - 1000  # the system prompt was not tokenised again


def test_the_memo_is_bounded(tok):
    memo = SegmentMemo.for_tokenizer(tok, max_pieces=3)
    assert memo is not None
    for i in range(10):
        text = f"<|im_start|>system\nPrompt number {i}. " + "Some instructions follow. " * 4 + "<|im_end|>"
        memo.encode(text)
        memo.encode(text)
    assert len(memo._pieces) == 3
    assert len(memo._seen) <= 4 * 3


def test_the_memo_is_bounded_in_characters(tok):
    """Long pieces (a MemAgent chunk, a document) count by their length, seen once or memoised."""
    memo = SegmentMemo.for_tokenizer(tok, max_chars=1000)
    assert memo is not None
    for i in range(12):
        text = f"<|im_start|>user\nDocument {i}: " + "a line of the document. " * (10 + 3 * i) + "<|im_end|>"
        for _ in range(3):
            assert memo.encode(text) == _ref(tok.backend_tokenizer, text)
        assert memo._piece_chars == sum(map(len, memo._pieces)) <= 1000
        assert memo._seen_chars == sum(map(len, memo._seen)) <= 1000
    assert memo._pieces  # the last ones fit
    huge = "<|im_start|>user\n" + "x " * 2000 + "<|im_end|>"  # longer than the whole budget: never kept
    for _ in range(3):
        assert memo.encode(huge) == _ref(tok.backend_tokenizer, huge)
    assert all(len(k) < 2000 for k in [*memo._pieces, *memo._seen])


def _metaspace_tokenizer():
    """A small BPE trained here, Metaspace pre-tokeniser that prefixes only the text's first piece."""
    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    corpus = ["hello world", "the quick brown fox", "hello there world"] * 20
    t.train_from_iterator(corpus, trainers.BpeTrainer(special_tokens=["<unk>"], vocab_size=80))
    t.add_special_tokens([AddedToken("<s>", special=True)])
    return t


def test_refuses_tokenizers_whose_pieces_depend_on_their_place(tok, splitting_tokenizer_double):
    meta = _metaspace_tokenizer()
    assert SegmentMemo.for_tokenizer(meta) is None
    # and rightly: forced, a piece tokenised on its own is prefixed as if it opened the text
    forced = SegmentMemo(meta, ["<s>"], min_chars=1)
    text = "hello<s>hello world<s>hello world"
    for _ in range(2):
        got = forced.encode(text)
    assert got != _ref(meta, text)

    stripping = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    assert SegmentMemo.for_tokenizer(stripping) is not None  # the copy itself is accepted
    stripping.add_special_tokens([AddedToken("<x>", special=True, lstrip=True)])  # eats the spaces before it
    assert SegmentMemo.for_tokenizer(stripping) is None
    byte_prefix = Tokenizer(models.BPE())
    byte_prefix.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert SegmentMemo.for_tokenizer(byte_prefix) is None
    truncating = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    truncating.enable_truncation(16)
    assert SegmentMemo.for_tokenizer(truncating) is None
    assert SegmentMemo.for_tokenizer(object()) is None  # a slow tokenizer, a double
    as_text = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    as_text.encode_special_tokens = True  # `<|im_start|>` becomes `<`, `|`, `im`, ...: no split there
    assert SegmentMemo.for_tokenizer(as_text) is None
    assert SegmentMemo.for_tokenizer(splitting_tokenizer_double) is None


def test_the_chat_renderer_encodes_whole_prompts_through_one_shared_memo(tok):
    r = ChatRenderer(tok)
    assert r._memo is not None and r.variant(template_kwargs={"enable_thinking": False})._memo is r._memo
    messages = [{"role": "system", "content": "Be exact. " * 30}, {"role": "user", "content": "2+2?"}]
    text = r.render(messages)
    for _ in range(3):
        assert list(r.start(messages)) == _ref(tok.backend_tokenizer, text)
    assert r._memo._pieces  # the system message is memoised


# Line starts: what stands either side of a newline that a printable ASCII character follows (the cut),
# and what must not be cut (a space, a tab, a non-ASCII letter, a combining mark after the newline).
LINE_ATOMS = [
    "\n",
    "\r\n",
    "\n\n",
    " \n",
    "  \n",
    "\t\n",
    ".\n",
    "?!\n",
    "\n ",
    "\n\t",
    "\n\u0301",
    "\ne\u0301",
    "\n\u00e9t\u00e9",
    "\n世界",
    "\n's",
    "\n'll do",
    "\n123",
    "\n-",
    "\n--- ",
    '\n{"a": 1}',
    "\nDoc 1: ",
    "word",
    " word",
    "it's",
    "x" * 70,
    "The ledger for 1738 lists the builders of the lock, and the toll collector's name.",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_response>",
]


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_line_cuts_tokenise_exactly_as_the_whole_text(tok, data):
    """Pieces cut at line starts too (Qwen2's pre-tokeniser), memoised from one character up and
    reused in other surroundings: the same ids as `tokenizers` on the whole text."""
    backend = tok.backend_tokenizer
    memo = SegmentMemo.for_tokenizer(tok, min_chars=1, max_pieces=64)
    assert memo is not None and memo.lines
    line = st.lists(st.sampled_from(LINE_ATOMS), min_size=1, max_size=12).map("".join)
    lines = data.draw(st.lists(line, min_size=1, max_size=5))
    # the same lines again, in another order and joined differently: cut pieces meet new neighbours
    texts = ["".join(lines), "\n".join(reversed(lines)), "<|im_start|>user\n" + "".join(lines) + "<|im_end|>"]
    for text in texts * 3:
        assert memo.encode(text) == _ref(backend, text), repr(text)


def test_a_prompt_quoting_earlier_lines_tokenises_only_its_new_ones(tok):
    """An expert's prompt that repeats the documents of the conversation so far: after two sightings,
    their lines come from the memo, though no added token stands around them in the new prompt."""
    docs = [f"Doc {i}: the bridge wardens' ledger for {1700 + i} names the builders of lock {i}.\n" for i in range(8)]
    memo = SegmentMemo.for_tokenizer(tok)
    assert memo is not None and memo.lines
    counting = CountingBackend(tok.backend_tokenizer)
    memo._backend = counting
    for k in range(3):
        head = f"user\nQuestion {k}: who built lock 3?\n\nGathered so far:\n"
        text = "<|im_start|>" + head + "".join(docs) + "<|im_end|>"
        before = counting.chars
        assert memo.encode(text) == _ref(tok.backend_tokenizer, text)
        tokenised = counting.chars - before
    # the third time: the added tokens, the new head and (the head being short) the first document's
    # line joined to it; no other line
    assert tokenised == len("<|im_start|>") + len(head) + len(docs[0]) + len("<|im_end|>")
    assert tokenised < len(text) / 4  # of 659 characters


def test_line_cuts_only_for_qwen2s_pre_tokeniser_and_no_added_newline(tok):
    qwen = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    assert cuts_at_lines(tokenizer_config(qwen)) and exact_in_pieces(tokenizer_config(qwen))
    gpt2 = Tokenizer(models.BPE())
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert exact_in_pieces(tokenizer_config(gpt2)) and not cuts_at_lines(tokenizer_config(gpt2))
    other = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    other.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(r"\s+|\S+", behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    assert not cuts_at_lines(tokenizer_config(other))
    newline_token = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    newline_token.add_special_tokens([AddedToken("\n<sep>", special=True)])
    assert not cuts_at_lines(tokenizer_config(newline_token))
    memo = SegmentMemo.for_tokenizer(newline_token)
    assert memo is not None and not memo.lines  # still cut at added tokens


def test_gpt2s_regex_shows_why_line_cuts_need_qwen2s():
    """The reason for the check: with GPT-2's regex, spaces before a newline are one pre-token with it
    at the end of a text but two when a word follows, so 'A' + 'B' would not tokenise as 'A + B'."""
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    whole = [p for p, _ in gpt2.pre_tokenize_str("a  \nword")]
    apart = [p for p, _ in gpt2.pre_tokenize_str("a  \n")] + [p for p, _ in gpt2.pre_tokenize_str("word")]
    assert whole != apart


def test_threads_share_one_memo(tok):
    """A foreach node tokenises its document in a worker thread through the renderer's memo while the
    event loop's prompts use it: many threads at once, a memo small enough to evict all the time,
    every encoding exact and none of them failing."""
    import sys
    import threading

    memo = SegmentMemo.for_tokenizer(tok, min_chars=1, max_pieces=4, max_chars=400)
    assert memo is not None and memo.lines
    backend = tok.backend_tokenizer
    lines = [f"Line {i} of the shared document, long enough to be a piece of its own.\n" for i in range(40)]
    texts = ["".join(lines[k : k + 12]) + "<|im_end|>" for k in range(0, 28, 3)]
    refs = {t: _ref(backend, t) for t in texts}
    failures: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(300):
                text = texts[(i + offset) % len(texts)]
                assert memo.encode(text) == refs[text]
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: races show at once
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
    assert len(memo._pieces) <= 4 and memo._piece_chars == sum(map(len, memo._pieces)) <= 400
