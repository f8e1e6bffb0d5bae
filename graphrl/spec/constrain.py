"""`constrain:` on an llm node: structured output, passed to the engine as SGLang sampling params.

Input: the node's `constrain` mapping: exactly one of `regex` (the whole reply matches it),
`json_schema` (the reply is JSON valid under this schema; a mapping, or a JSON string) or `ebnf`
(an EBNF grammar; SGLang servers only, the embedded engine refuses it).
Output: a frozen `Constrain`; `sampling_params()` gives the keys SGLang's `/generate` takes
(`regex`, `json_schema` as a JSON string, `ebnf`).

Invariants: the values are fixed strings (never Jinja templates: regexes and schemas are full of
braces); a `regex` that Python's `re` cannot compile is a validation error (E002-style, located);
the constraint is enforced by the engine (SGLang's grammar backend, or graphrl's local engine via
outlines-core), never by rewriting the model's output.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Constrain(BaseModel):
    """Structured output for an llm node: exactly one of regex, json_schema, ebnf."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    regex: str | None = Field(None, description="the whole reply matches this regular expression (SGLang `regex`)")
    json_schema: dict[str, Any] | str | None = Field(
        None, description="the reply is JSON valid under this JSON Schema (SGLang `json_schema`)"
    )
    ebnf: str | None = Field(
        None, description="the reply follows this EBNF grammar (SGLang `ebnf`; not on the embedded engine)"
    )

    @model_validator(mode="after")
    def _one(self) -> Constrain:
        given = [k for k in ("regex", "json_schema", "ebnf") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"constrain takes exactly one of regex, json_schema, ebnf; got {given or 'none'}")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"constrain.regex is not a valid regular expression: {exc}") from None
        if isinstance(self.json_schema, str):
            try:
                json.loads(self.json_schema)
            except ValueError as exc:
                raise ValueError(f"constrain.json_schema is not valid JSON: {exc}") from None
        return self

    def sampling_params(self) -> dict[str, str]:
        if self.regex is not None:
            return {"regex": self.regex}
        if self.json_schema is not None:
            schema = self.json_schema
            return {"json_schema": schema if isinstance(schema, str) else json.dumps(schema, sort_keys=True)}
        return {"ebnf": str(self.ebnf)}
