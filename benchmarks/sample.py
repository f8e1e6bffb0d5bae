"""A stand-in for slime's `Sample` (slime.utils.types.Sample): the field names slime's rollout code
passes to and reads back from a custom generate function (docs/architecture.md, slime contract §1), nothing more.

`samples_for(rows, n_samples)` builds what slime's data loader hands over: one Sample per rollout,
`index` unique, `group_index` per prompt, a `session_id` per sample, status PENDING.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    prompt: Any = ""
    label: Any = None
    metadata: dict = field(default_factory=dict)
    index: int | None = None
    group_index: int | None = None
    session_id: str | None = None
    tokens: list = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    loss_mask: list | None = None
    rollout_log_probs: list | None = None
    reward: Any = None
    status: Sample.Status = Status.PENDING
    rollout_id: int | None = None
    remove_sample: bool = False

    def sibling(self) -> Sample:
        """A fresh sample of the same rollout (what a fan-out generate function returns)."""
        return Sample(
            prompt=self.prompt,
            label=self.label,
            metadata=self.metadata,
            index=self.index,
            group_index=self.group_index,
            session_id=self.session_id,
        )


def samples_for(rows: list[dict], n_samples: int) -> list[Sample]:
    out = []
    for g, row in enumerate(rows):
        for k in range(n_samples):
            i = g * n_samples + k
            out.append(
                Sample(
                    prompt=row["prompt"],
                    label=copy.deepcopy(row["label"]),
                    metadata=dict(row.get("metadata") or {}),
                    index=i,
                    group_index=g,
                    session_id=f"s{i:06d}",
                )
            )
    return out


def as_list(result: Any) -> list[Sample]:
    return list(result) if isinstance(result, list) else [result]
