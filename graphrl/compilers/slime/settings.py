"""The `slime:` section of a graph file: slime options that change how the graph must be compiled.

Input: the section's mapping (graph file) or the plan's `targets["slime"]`. Output: `SlimeSettings`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...plan import Plan


class SlimeSettings(BaseModel):
    """slime options that change how the graph must be compiled (checked against fan-out)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    partial_rollout: bool = False
    group_rm: bool = False
    dynamic_sampling_filter: str | None = None
    teacher: str | None = Field(
        None,
        description="on-policy distillation: a model declared under models: whose log-probs of each trained "
        "sample's tokens fill slime's teacher_log_probs (adds --use-opd --opd-type sglang)",
    )
    extra_args: list[str] = Field(default_factory=list)


def settings_of(plan: Plan) -> SlimeSettings:
    """The plan's `slime:` section (defaults when the graph has none)."""
    return SlimeSettings.model_validate(plan.targets.get("slime") or {})
