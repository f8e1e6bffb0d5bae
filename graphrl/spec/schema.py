"""JSON Schema of graph files, for editors (yaml-language-server) and external validation.

Input: the pydantic models of `graphrl.spec.model`. Output: a JSON-serialisable dict (draft 2020-12).

Invariants: every shorthand that `desugar` accepts is accepted by the schema too (a test validates
the bundled graphs against it); every canonical form is accepted; unknown keys are rejected
(additionalProperties: false), mirroring the checker.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Union

from pydantic import BaseModel, Field

from .model import GraphSpec
from .nodes import KINDS


class _SchemaGraph(GraphSpec):
    nodes: dict[str, Union[KINDS]] = Field(  # type: ignore[assignment,valid-type]
        min_length=1, description="node id -> node (llm, tool, switch, or update-only)"
    )


def _or_string(prop: dict[str, Any], what: str) -> dict[str, Any]:
    return {"anyOf": [{"type": "string", "description": what}, prop]}


CONSTANT_REF = {
    "type": "string",
    "pattern": r"^\$[A-Za-z_][A-Za-z0-9_]*$",
    "description": "$NAME: the value of a constant (constants:)",
}


def _accept_constant_refs(schema: dict[str, Any]) -> None:
    """Every property also accepts `$NAME` (graphrl.spec.constants replaces it before validation)."""
    for holder in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in list(holder.get("properties", {}).items()):
            if name != "constants":
                holder["properties"][name] = {"anyOf": [prop, CONSTANT_REF]}


def graph_json_schema(sections: Mapping[str, type[BaseModel]] | None = None) -> dict[str, Any]:
    """The schema; `sections`: the compile targets' graph sections (name -> settings model)."""
    schema = copy.deepcopy(_SchemaGraph.model_json_schema(by_alias=True))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "graphrl graph"
    defs = schema["$defs"]
    for name in (k.__name__ for k in KINDS):
        props = defs[name]["properties"]
        props.pop("kind", None)
        if "next" in props:
            props["next"] = _or_string(props["next"], "shorthand: the id of the next node")
        props["append_to"] = _or_string(props["append_to"], "shorthand: a thread name")
        props["foreach"] = _or_string(props["foreach"], "shorthand: the expression to iterate over")
        if "prompt" in props:
            msg_or_str = {
                "anyOf": [
                    {"$ref": "#/$defs/Message"},
                    {"type": "string", "description": "a template yielding messages"},
                ]
            }
            props["prompt"] = {
                "anyOf": [
                    {"type": "string", "description": "a template yielding messages"},
                    {"type": "array", "items": msg_or_str},
                    {"type": "null"},
                ]
            }
    defs["Thread"]["properties"]["prompt"] = {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "minItems": 1, "items": {"anyOf": [{"$ref": "#/$defs/Message"}, {"type": "string"}]}},
        ]
    }
    props = schema["properties"]
    props["state"]["additionalProperties"] = {
        "anyOf": [
            {"$ref": "#/$defs/StateVar"},
            {"not": {"type": "object"}, "description": "shorthand: the default value"},
        ]
    }
    props["inputs"]["additionalProperties"] = {
        "anyOf": [{"$ref": "#/$defs/InputDecl"}, {"type": "string", "description": "shorthand: the row expression"}]
    }
    for name, model in sorted((sections or {}).items()):
        sub = model.model_json_schema(by_alias=True)
        defs.update(sub.pop("$defs", {}))
        defs[model.__name__] = sub
        props[name] = {"$ref": f"#/$defs/{model.__name__}"}
    _accept_constant_refs(schema)
    props["reward"] = {"anyOf": [{"$ref": "#/$defs/Reward"}, {"type": "string"}, {"type": "null"}]}
    return schema
