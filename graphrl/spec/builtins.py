"""Names the graph language knows without imports: built-in tools, rewards and group rewards.

Input: nothing (a static table). Output: `BUILTIN_TOOLS`, `BUILTIN_REWARDS`, `BUILTIN_GROUP_REWARDS`:
name -> `Signature(required, optional)` used by the checks (unknown names, argument names) and
by the runtime registries, which must implement exactly these signatures (a test keeps them equal).

Invariant: this is the single list of built-in names; docs/graph-language.md lists the same.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    summary: str = ""
    judge: bool = False  # accepts reward.judge (a model name)
    dict_key: str | None = None  # a reward that returns a dict: the key it trains on unless reward.key says

    @property
    def names(self) -> tuple[str, ...]:
        return self.required + self.optional


BUILTIN_TOOLS: dict[str, Signature] = {
    "python": Signature(
        ("code",),
        ("stdin", "session", "strict"),
        "run code in a sandboxed subprocess (session: true keeps one interpreter per rollout); the observation is stdout+stderr",
    ),
    "retrieve": Signature(("query", "url"), ("topk",), "POST /retrieve {queries, topk}; numbered documents"),
    "env_step": Signature(
        ("action",),
        (),
        "the rollout's environment: env.step(action); the observation, plus done / reward / info when it gives them",
    ),
}
# built-in tools' result fields (besides text, ok, error), for templates that read them
TOOL_FIELDS: dict[str, tuple[str, ...]] = {
    "python": ("exit_status", "sandbox", "session_calls", "fresh_session"),
    "retrieve": (),
    "env_step": ("done", "reward", "info"),
}
# what needs a graph-level `environment:`
NEEDS_ENVIRONMENT = frozenset({"env_step", "env_reward"})

BUILTIN_REWARDS: dict[str, Signature] = {
    "exact_match": Signature(
        ("prediction", "label"),
        ("extract", "tail_chars", "question"),
        "normalised exact match (LaTeX stripped); label may be a list (max over answers); "
        'if 0 and a judge is set, the judge\'s {"correct": true|false}',
        judge=True,
    ),
    "f1": Signature(("prediction", "label"), ("extract", "tail_chars"), "token F1 after normalisation"),
    "sub_em": Signature(
        ("prediction", "label"),
        ("extract", "tail_chars", "question"),
        "a gold answer is contained in the prediction; if 0 and a judge is set, the judge's verdict",
        judge=True,
    ),
    "math_equal": Signature(
        ("prediction", "label"),
        ("question",),
        "last \\boxed{} equal after math normalisation, else the judge; dict {score, acc, pred, gt}",
        judge=True,
        dict_key="score",
    ),
    "judge": Signature(
        ("question", "prediction", "label"),
        ("instructions",),
        "ask the judge model; parses a last-line VERDICT: True/False",
        judge=True,
    ),
    "format": Signature(("text", "pattern"), (), "1.0 when the regex `pattern` is found in `text` (DOTALL), else 0.0"),
    "tool_use": Signature(
        ("calls",), ("min",), "1.0 when `calls` (a number, e.g. from usage.calls) >= min (1), else 0.0"
    ),
    "env_reward": Signature((), (), "the rollout's environment: env.reward() (a float, or a dict with the reward key)"),
    "value": Signature(("value",), (), "the value itself as a float (a template computes it)"),
}

BUILTIN_GROUP_REWARDS: dict[str, Signature] = {
    "preference": Signature(
        (),
        ("weights", "features", "clip", "min_std"),
        "ToolOrchestra: wrong -> 0, right -> preference-weighted sum of features min-max "
        "normalised in the group; then z-score clipped to +-clip; groups with std <= min_std dropped",
    ),
}
