"""Conversation threads, token-exact: messages + engine outputs -> the token ids of one conversation.

Input: a Hugging Face tokenizer with a chat template (`ChatRenderer`); chat messages and tools; for
every LLM call, the ids the engine returned.
Output: a `ChatThread` whose `ids` are, by construction, exactly

    prompt ids ++ output_1 ++ delta_1 ++ output_2 ++ delta_2 ++ ...

where output_k are the engine's ids (never decoded and re-encoded) and delta_k is the tokenisation
of new text only: what the template renders after output_k (the assistant turn's closing, the
messages appended since — tool results, a user turn — and the next generation prompt).

Continuing a thread after the model answered (`add_output`, `add_messages`, `prepare`):
  * the assistant message kept in the history is `decode(output ids)` minus a final stop token; it
    is used to render the template, never for training tokens;
  * `prepare` renders the whole conversation once (generation prompt on) into A and checks that the
    text the thread already holds, T = rendered prompt + outputs + earlier deltas, is a prefix of A.
    That single check is the "rendering without the new messages is a prefix of the rendering with
    them" condition, for every character the thread's tokens already cover; the delta is A[len(T):].
    Each LLM call therefore costs exactly one render (A becomes the T of the next turn).
Boundary rules (where the engine's tokens end and the delta begins):
  * output ended with a stop token (`<|im_end|>`; any id in `stop_token_ids` or the finish reason's
    matched id): if the template's closing starts with that token's text, it is consumed and the
    delta starts right after it (ChatML: the delta starts with the "\n" after `<|im_end|>`);
    otherwise (e.g. `<|endoftext|>` where the template closes with `<|im_end|>`) the sampled token
    stays in the thread and the delta carries the template's full closing ("kept stop token");
  * output stopped on a stop string, or was cut by length or by an abort: the template's closing is
    missing, so the delta begins with it (ChatML: `<|im_end|>\n...`), masked like all delta tokens.
Guarantees (checked at every `prepare`, except the last line):
  * `ids` == prompt ids ++ outputs ++ deltas, exactly;
  * the from-scratch rendering A of the conversation equals T + delta text, where T's assistant
    parts are the decoded outputs; kept stop tokens are the only text in the ids but not in A;
  * decode(ids) == A except for (a) kept stop tokens, (b) the tokenizer's normalisation of tokenised
    text (Qwen: NFC), (c) U+FFFD where an output cut by length ends inside a UTF-8 sequence;
  * delta ids equal the ids a from-scratch tokenisation of A gives for the same characters when the
    delta starts at a pre-tokeniser boundary — true for ChatML templates, whose deltas start with a
    special token or with "\n" after `<|im_end|>`. Not checked per call (that re-tokenises the whole
    conversation); `ChatRenderer(strict=True)` checks it, the tests check it for Qwen.
Non-append-only templates (e.g. Qwen3's, which drops `<think>` blocks of earlier assistant turns once
a new user turn arrives) fail the prefix check: `NotAppendOnlyError` names the message and shows the
first differing characters; with `on_drift="new_sample"` the thread instead restarts from a fresh
rendering (a new prompt; the caller starts a new training sample). The drift and strict-mode
diagnostics live in `runtime.chat_drift`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from graphrl.models.bytelevel import ByteDecoder
from graphrl.models.segments import SegmentMemo
from graphrl.runtime import chatml_native
from graphrl.runtime.chat_drift import DeltaMismatchError as DeltaMismatchError  # re-exported
from graphrl.runtime.chat_drift import NotAppendOnlyError as NotAppendOnlyError
from graphrl.runtime.chat_drift import check_boundary, drift_error
from graphrl.runtime.chat_parts import DeltaPart, label_parts
from graphrl.runtime.chat_template import (
    CompletionRenderer,
    TemplateRenderer,
    plain,
    template_message,
    template_tools,
)


class OnDrift(str, Enum):
    """What `ChatThread.prepare` does when the template is not append-only."""

    NEW_SAMPLE = "new_sample"  # restart the thread from a fresh rendering: a new training sample
    FAIL = "fail"  # raise NotAppendOnlyError


class ThreadStateError(RuntimeError):
    """A thread method was called out of order (e.g. two outputs without a prepare between)."""


class ContextBudgetError(ValueError):
    """A thread does not fit its `max_tokens` budget even after truncation."""


@dataclass(frozen=True)
class ThreadDelta:
    """What `prepare` adds. kind "prompt": `ids` are a whole new prompt (the first call, or a
    restart after drift: start a new sample with them). kind "append": append `ids` (mask 0)."""

    kind: str  # "prompt" | "append"
    ids: tuple[int, ...]
    text: str
    parts: tuple[DeltaPart, ...] = ()  # covers ids exactly, in order (kind "append" only)
    drift: str | None = None  # the NotAppendOnlyError message that caused a restart
    kept_stop: bool = False  # the previous output's stop token stays in the thread (see module doc)


class ChatRenderer:
    """A tokenizer + its chat template. Stateless across conversations; threads hold the state."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        chat_template: str | None = None,
        stop_token_ids: Iterable[int] | None = None,
        strict: bool = False,
        vocab_size: int | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        completion: bool = False,
        _shares: ChatRenderer | None = None,
    ):
        """`chat_template`: a template's source instead of the tokenizer's; `template_kwargs`:
        variables every render gets (e.g. {"enable_thinking": False}); `completion`: no chat
        template at all, the prompt is the messages' text as written (see `CompletionRenderer`).
        `_shares` (`variant`): the renderer of the same tokenizer whose decoding table and segment
        memo this one uses instead of making its own."""
        self.tokenizer = tokenizer
        self.template: TemplateRenderer | CompletionRenderer = (
            CompletionRenderer()
            if completion
            else TemplateRenderer.for_tokenizer(tokenizer, chat_template, kwargs=template_kwargs)
        )
        self.strict = strict
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._backend = None if getattr(tokenizer, "split_special_tokens", False) else backend
        if stop_token_ids is None:
            stop_token_ids = _default_stop_ids(tokenizer)
        self.stop_token_ids = frozenset(int(i) for i in stop_token_ids)
        self._one: dict[int, str] = {}  # single-token decodings (a turn's stop token, every turn)
        # the byte-level decoding table, built at the first decode and shared with variants:
        # [table] once built ([None]: the tokenizer's decode is not plain byte-level)
        self._bytes: list[ByteDecoder | None] = [] if _shares is None else _shares._bytes
        # whole-prompt tokenisation with long pieces between special tokens memoised (system prompts,
        # tool descriptions): exact for the tokenizers `SegmentMemo` accepts, None for the others
        self._memo: SegmentMemo | None
        if _shares is not None:
            self._memo = _shares._memo
        else:
            self._memo = SegmentMemo.for_tokenizer(tokenizer) if self._backend is not None else None
        # The ids a model may legally emit: the tokenizer's (base + added special tokens), or the
        # model's embedding rows when the caller knows them (often padded past the tokenizer, e.g.
        # 151,936 rows for Qwen2.5's 151,669 ids); ids at or past this bound are engine errors.
        try:
            known: int | None = len(tokenizer)
        except TypeError:
            known = None
        self.vocab_size: int | None = max(known or 0, vocab_size or 0) or None
        self._variants: dict[str, ChatRenderer] = {}

    @property
    def completion(self) -> bool:
        """True in completion mode (no chat template)."""
        return self.template.completion

    def variant(
        self,
        *,
        chat_template: str | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
        completion: bool = False,
    ) -> ChatRenderer:
        """This renderer's tokenizer, stop ids and vocabulary with another chat template, template
        variables, or completion mode (a model's `chat_template`, `chat_template_kwargs`,
        `completion`). Variants are cached: the template compiles once per renderer."""
        if completion:
            chat_template, template_kwargs = None, None
        key = repr((chat_template, sorted((template_kwargs or {}).items()), completion))
        out = self._variants.get(key)
        if out is None:
            out = self._variants[key] = ChatRenderer(
                self.tokenizer,
                chat_template=chat_template or (None if self.completion else self.template.source),
                stop_token_ids=self.stop_token_ids,
                strict=self.strict,
                vocab_size=self.vocab_size,
                template_kwargs={**self.template.kwargs, **(template_kwargs or {})},
                completion=completion,
                _shares=self,
            )
        return out

    # -- text <-> ids -----------------------------------------------------------------------------
    def encode(self, text: str) -> tuple[int, ...]:
        """New text -> ids, no BOS/EOS added (the template writes every special token itself)."""
        if self._memo is not None:
            return tuple(self._memo.encode(text))
        return tuple(self._encode(text)[0])

    def _encode(self, text: str) -> tuple[list[int], Any]:
        if self._backend is not None:
            enc = self._backend.encode(text, add_special_tokens=False)
            return enc.ids, enc
        return list(self.tokenizer.encode(text, add_special_tokens=False)), None

    def decode(self, ids: Sequence[int]) -> str:
        """Ids -> text with special tokens and spacing kept (used for rendering, never training)."""
        if len(ids) == 1:
            text = self._one.get(ids[0])
            if text is None:
                text = self._decode(ids)
                if len(self._one) < 4096:
                    self._one[ids[0]] = text
            return text
        return self._decode(ids)

    def warm(self) -> None:
        """Build now what the first decode would build (the byte table, ~0.1-0.3 s), so that it is not
        paid inside a rollout's time limit; an executor calls it for its models' renderers when it is made."""
        if self._backend is not None and not self._bytes:
            self._bytes.append(ByteDecoder.for_tokenizer(self.tokenizer))

    def _decode(self, ids: Sequence[int]) -> str:
        if self._backend is not None:
            if not self._bytes:
                self.warm()
            table = self._bytes[0]
            if table is not None:
                try:  # the same text as the tokenizer's decode, from a table (graphrl.models.bytelevel)
                    return table.decode(ids)
                except KeyError:  # an id the table does not have: the tokenizer says what it is
                    pass
            return self._backend.decode(list(ids), skip_special_tokens=False)
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    # -- rendering -------------------------------------------------------------------------------
    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping] | None = None,
        add_generation_prompt: bool = True,
        **variables: Any,
    ) -> str:
        """Like `apply_chat_template(messages, tools=..., tokenize=False, **variables)`."""
        return self.template.render(
            [template_message(m) for m in messages],
            tools=template_tools(tools),
            add_generation_prompt=add_generation_prompt,
            variables=plain(variables),
        )

    def start(
        self, messages: Iterable[Mapping[str, Any]], tools: Sequence[Mapping] | None = None, **variables: Any
    ) -> tuple[int, ...]:
        """The prompt ids of a fresh conversation, generation prompt included (encoded once)."""
        return self.encode(self.render(messages, tools=tools, add_generation_prompt=True, **variables))

    def thread(
        self, messages: Iterable[Mapping[str, Any]], tools: Sequence[Mapping] | None = None, **variables: Any
    ) -> ChatThread:
        """A conversation thread; its first `prepare()` returns the prompt."""
        return ChatThread(self, messages, tools=tools, variables=variables)


def _default_stop_ids(tokenizer: Any) -> set[int]:
    out: set[int] = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        out.add(eos)
    vocab_lookup = getattr(tokenizer, "convert_tokens_to_ids", None)
    unk = getattr(tokenizer, "unk_token_id", None)
    for text in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>"):
        if vocab_lookup is not None:
            tid = vocab_lookup(text)
            if isinstance(tid, int) and tid != unk:
                out.add(tid)
    return out


class ChatThread:
    """One conversation's token ids, grown only by appending. Not thread-safe; one per rollout path.

    Cycle: prepare() -> [send `ids` to the engine] -> add_output(...) -> add_messages(...) -> prepare()
    """

    def __init__(
        self,
        renderer: ChatRenderer,
        messages: Iterable[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping] | None = None,
        variables: Mapping[str, Any] | None = None,
    ):
        self._r = renderer
        self._tools = template_tools(tools)  # this thread's own copy, never changed:
        # its JSON lines for the native ChatML renderer are made once, not at every render
        self._tools_text = chatml_native.tools_json(self._tools) if self._tools and renderer.template.native else None
        self._vars = plain(dict(variables or {}))
        self._messages: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = [template_message(m) for m in messages]
        self._ids: list[int] = []
        self._ids_view: tuple[int, ...] | None = None
        self._text = ""  # template-space text the ids stand for (see module doc)
        self._content_start = 0  # where the last output's text starts in _text
        self._tail = ""  # text of the stop token the last output ended with ("" if none)
        self._state = "new"  # "new" -> "ready" <-> "answered"
        self._continuing = False  # the next output extends the last assistant message (in-response text)
        self._opening = 0  # how many messages the thread opened with (kept when a budget truncates it)
        self.prompt_length = 0

    @property
    def ids(self) -> tuple[int, ...]:
        """All ids so far (what the next engine call is sent); cached until the thread grows."""
        if self._ids_view is None or len(self._ids_view) != len(self._ids):
            self._ids_view = tuple(self._ids)
        return self._ids_view

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def renderer(self) -> ChatRenderer:
        return self._r

    @property
    def text(self) -> str:
        """The rendered conversation the ids stand for (last output's text, no closing, if answered)."""
        return self._text

    @property
    def messages(self) -> tuple[dict[str, Any], ...]:
        return tuple(self._messages) + tuple(self._pending)

    def message_list(self) -> list[dict[str, Any]]:
        """`messages` as a new list (one copy; templates see the messages themselves, never changed)."""
        return self._messages + self._pending

    @property
    def state(self) -> str:
        return self._state

    @property
    def opening(self) -> int:
        """How many messages the thread opened with (a budget never drops or summarises them)."""
        return self._opening

    def replace_history(
        self, messages: Iterable[Mapping[str, Any]], *, note: str, budget: int | None = None
    ) -> ThreadDelta:
        """Restart the thread from `messages` (e.g. its opening, a summary of older turns, the newest
        turns): rendered afresh with the generation prompt, a new prompt (kind "prompt": the caller
        starts a new sample). ContextBudgetError, with the thread unchanged, when the rendering has
        more than `budget` ids."""
        if self._pending:
            raise ThreadStateError("replace_history needs a prepared thread (messages are queued)")
        msgs = [template_message(m) for m in messages]
        rendered = self._render(msgs)
        ids = self._r.encode(rendered)
        if budget is not None and len(ids) > budget:
            raise ContextBudgetError(f"the thread needs {len(ids)} tokens ({note}), over its {budget}-token budget")
        self._messages, self._continuing = msgs, False
        return self._restart(rendered, drift=note, ids=ids)

    def add_messages(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Queue messages (tool results, a user turn); the next `prepare` renders them all at once."""
        self._pending.extend(template_message(m) for m in messages)

    def add_output(self, output_ids: Sequence[int], finish_reason: Any = None) -> str:
        """Append the engine's ids verbatim; return the assistant text (stop token removed)."""
        if self._state != "ready":
            raise ThreadStateError(f"add_output needs a prepared thread (state {self._state!r})")
        if self._pending:
            raise ThreadStateError("messages were added after prepare() and before the output")
        ids = list(output_ids)
        if set(map(type, ids)) - {int}:  # engines give plain ints; anything else goes through index()
            ids = [operator.index(i) for i in ids]
        stops = self._r.stop_token_ids
        matched = getattr(finish_reason, "matched", None)
        if isinstance(matched, int) and not isinstance(matched, bool):
            stops = stops | {matched}
        if ids and ids[-1] in stops:
            content, tail = self._r.decode(ids[:-1]), self._r.decode(ids[-1:])
        else:
            content, tail = self._r.decode(ids), ""
        self._ids.extend(ids)
        if self._continuing:  # the same assistant response goes on after in-response text
            last = self._messages[-1]
            self._messages[-1] = template_message({**last, "content": (last.get("content") or "") + content})
            self._continuing = False
        else:
            self._messages.append(template_message({"role": "assistant", "content": content}))
            self._content_start = len(self._text)
        self._text += content
        self._tail = tail
        self._state = "answered"
        return content

    def continue_response(self, text: str) -> tuple[int, ...]:
        """Append `text` inside the current assistant response (no turn markers): the next engine
        call continues the same response from exactly these ids. Returns the ids of `text` (plain
        tokenisation of the new text; the engine's ids before it are untouched).

        Meant for an output that stopped on a stop string (e.g. `</search>`) or a length cut; after a
        stop token (`<|im_end|>`) the token stays and the text follows it."""
        if not (self._state == "answered" or (self._state == "ready" and self._continuing)):
            raise ThreadStateError(f"in-response text needs a thread that has just answered (state {self._state!r})")
        if self._pending:
            raise ThreadStateError("in-response text cannot follow messages queued for a new turn")
        if not text:
            return ()
        ids, _ = self._r._encode(text)
        # After a stop token (the model ended its turn) the token stays where it was sampled and the
        # text follows it, as Search-R1's recipe does for an invalid action; the message content
        # keeps the token's text so that later renderings still extend what the ids stand for.
        last = self._messages[-1]
        self._messages[-1] = template_message({**last, "content": (last.get("content") or "") + self._tail + text})
        self._text += self._tail
        self._tail = ""
        self._ids.extend(ids)
        self._text += text
        self._state, self._continuing = "ready", True
        return tuple(ids)

    def prepare(self, on_drift: OnDrift | str = OnDrift.FAIL, budget: int | None = None) -> ThreadDelta:
        """Render pending messages + the generation prompt; extend `ids` (see ThreadDelta.kind).
        `budget`: past that many ids, restart from the opening messages and the latest messages
        that fit (`_truncate`: a new sample); ContextBudgetError when not even those fit."""
        delta = self._prepare(on_drift)
        if budget is not None and len(self._ids) > budget:
            return self._truncate(budget)
        return delta

    def _prepare(self, on_drift: OnDrift | str) -> ThreadDelta:
        on_drift = OnDrift(on_drift)
        if self._state == "new":
            rendered = self._render(self._pending)  # may raise: then nothing has changed
            self._messages, self._pending = self._pending, []
            self._opening = len(self._messages)
            return self._restart(rendered, drift=None)
        if self._state == "ready" and not self._pending:
            return ThreadDelta("append", (), "", ())
        self._continuing = False  # new messages close the response (the template renders its end)
        history = self._messages + self._pending
        rendered = self._render(history)
        if not rendered.startswith(self._text):
            error = drift_error(
                self._text,
                rendered,
                history,
                n_messages=len(self._messages),
                output_start=self._content_start if self._state == "answered" else None,
                render=lambda msgs: self._render(msgs, generation_prompt=False),
            )
            if on_drift is OnDrift.FAIL:
                raise error
            self._messages, self._pending = history, []
            return self._restart(rendered, drift=str(error))
        pos = len(self._text)
        kept = bool(self._tail) and not rendered.startswith(self._tail, pos)
        if not kept:
            pos += len(self._tail)
        delta_text = rendered[pos:]
        ids, enc = self._r._encode(delta_text)
        if self._r.strict:
            check_boundary(self._r._encode, rendered, pos, ids)
        first_new = len(self._messages)
        new_messages = list(enumerate(self._pending, start=first_new))
        self._ids.extend(ids)
        self._text, self._tail, self._state = rendered, "", "ready"
        self._messages, self._pending = history, []
        parts = label_parts(delta_text, ids, enc, new_messages)
        return ThreadDelta("append", tuple(ids), delta_text, parts, kept_stop=kept)

    # -- internals -------------------------------------------------------------------------------
    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool = True) -> str:
        return self._r.template.render(
            messages,
            tools=self._tools,
            add_generation_prompt=generation_prompt,
            variables=self._vars,
            tools_text=self._tools_text,
        )

    def _truncate(self, budget: int) -> ThreadDelta:
        """Drop the oldest messages after the opening ones, whole and starting the kept part at a
        user message, until the rendering fits in `budget` ids; restart from it (a new sample)."""
        opening, rest = self._messages[: self._opening], self._messages[self._opening :]
        for start in range(1, len(rest)):  # the newest message is always kept
            if start < len(rest) - 1 and rest[start].get("role") != "user":
                continue
            kept = opening + rest[start:]
            rendered = self._render(kept)
            if len(self._r.encode(rendered)) <= budget:
                self._messages = kept
                note = f"truncated to {budget} tokens: dropped {start} of {len(rest)} messages after the opening"
                return self._restart(rendered, drift=note)
        raise ContextBudgetError(
            f"the thread needs more than its {budget}-token budget even with only its opening messages "
            "and the newest turn"
        )

    def _restart(self, rendered: str, drift: str | None, ids: Sequence[int] | None = None) -> ThreadDelta:
        ids = list(self._r.encode(rendered) if ids is None else ids)
        if not ids:
            raise ValueError("the chat template rendered an empty prompt")
        self._ids, self._text, self._tail, self._state = ids, rendered, "", "ready"
        self._ids_view = None
        self.prompt_length = len(ids)
        return ThreadDelta("prompt", tuple(ids), rendered, (), drift=drift)
