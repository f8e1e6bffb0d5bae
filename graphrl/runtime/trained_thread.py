"""A conversation thread and its training sample, grown together: render -> generate -> record.

Input: a `ChatThread` (the append-only token ids the engine is sent) and whether the thread is a
training sample (`sample: thread` nodes continue it). Output: on each `prepare`, the ids for the
next engine call; on each `record_output`, the assistant text. The sample builders it starts are
handed to `on_sample` in creation order (a drift restart starts a new one).

Invariants: the sample's prompt + response ids are the thread's ids, always: observations (the
rendered delta of new messages) enter both with mask 0 and are attributed to the node that added
the message; engine outputs enter both verbatim with the node's mask and the engine's log-probs.
`record_output` checks the two lengths agree (a `LedgerError` otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .chat import ChatThread, ThreadDelta
from .ledger import CallRecord, LedgerError, SampleBuilder


class TrainedThread:
    def __init__(
        self, chat: ChatThread, *, sampled: bool, rollout_id: int | str, on_sample: Callable[[SampleBuilder], None]
    ):
        self.chat = chat
        self.sampled = sampled
        self._rollout_id = rollout_id
        self._on_sample = on_sample
        self._owners: dict[int, tuple[str, int]] = {}  # message index -> (node, visit) that added it
        self.sample: SampleBuilder | None = None

    @property
    def ids(self) -> tuple[int, ...]:
        return self.chat.ids

    @property
    def messages(self) -> tuple[dict[str, Any], ...]:
        return self.chat.messages

    def add_messages(self, messages: Iterable[Mapping[str, Any]], *, owner: tuple[str, int] | None = None) -> None:
        """Queue messages; with `owner`, their tokens are attributed to that (node, visit)."""
        msgs = list(messages)
        if owner is not None:
            first = len(self.chat.messages)
            for i in range(len(msgs)):
                self._owners[first + i] = owner
        self.chat.add_messages(msgs)

    def continue_response(self, text: str, *, owner: tuple[str, int]) -> None:
        """Text inside the current assistant response (an in-response observation, mask 0, attributed
        to `owner`); the next call of the thread continues the same response."""
        ids = self.chat.continue_response(text)
        if self.sample is not None and ids:
            self.sample.append(ids, mask=0, node=owner[0], visit=owner[1], kind="observation")

    def prepare(
        self, on_drift: str, *, node: str, visit: int, budget: int | None = None, overflow: int | None = None
    ) -> tuple[int, ...]:
        """Render what was queued; the observation tokens go into the sample (mask 0). A drift or a
        budget truncation restarts the thread: a new sample. `overflow`: a budget the caller enforces
        itself (a summary): past it nothing is recorded, the sample ends at its last output, and the
        caller restarts the thread (`replace_history`) or ends the rollout."""
        delta = self.chat.prepare(on_drift, budget)
        if overflow is not None and len(self.chat) > overflow:
            return self.chat.ids
        return self._record_delta(delta, node, visit)

    def replace_history(
        self, messages: Iterable[Mapping[str, Any]], *, note: str, budget: int | None
    ) -> tuple[int, ...]:
        """Restart from `messages` (a summary in place of older turns): the current sample ends as it
        is, a new one starts whose prompt is exactly the ids of the new rendering."""
        return self._record_delta(self.chat.replace_history(messages, note=note, budget=budget), "", 0)

    def _record_delta(self, delta: ThreadDelta, node: str, visit: int) -> tuple[int, ...]:
        if delta.kind == "prompt":  # every message so far is in the new prompt: no owner is needed any more
            self._owners.clear()  # (and after a truncation or a summary the message indexes moved)
        if self.sampled:
            if delta.kind == "prompt":  # first call, or a restart (drift, budget): a new sample
                self.sample = SampleBuilder(delta.ids, rollout_id=self._rollout_id)
                self._on_sample(self.sample)
            elif delta.ids and self.sample is not None:
                for part in delta.parts:
                    who, when = (
                        (node, visit)
                        if part.message_index is None
                        else self._owners.get(part.message_index, (node, visit))
                    )
                    self.sample.append(delta.ids[part.start : part.end], mask=0, node=who, visit=when, kind=part.kind)
        return self.chat.ids

    def record_output(
        self,
        output_ids: Sequence[int],
        logprobs: Sequence[float] | None,
        finish_reason: Any,
        *,
        mask: int,
        node: str,
        visit: int,
        call: CallRecord,
    ) -> str:
        """Append the engine's output to the thread and, when the thread is sampled, to its sample."""
        if self.sample is not None:
            self.sample.append(output_ids, mask=mask, logprobs=logprobs, node=node, visit=visit, kind="generated")
            self.sample.record_call(call)
        text = self.chat.add_output(output_ids, finish_reason)
        if self.sample is not None:
            have = self.sample.prompt_length + self.sample.response_length
            if have != len(self.chat):
                raise LedgerError(f"{node}#{visit}: the sample holds {have} tokens but thread has {len(self.chat)}")
        return text
