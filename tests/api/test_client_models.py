"""The client's models (``airlock.client.models``) are the served OpenAPI document's: the
same fields, required alike, of the same JSON types. A field the API adds, drops or
retypes fails here before a client misreads it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from airlock.client import models
from tests.api.conftest import Api

SERVED: dict[str, type[BaseModel]] = {
    "RunView": models.Run,
    "UsageView": models.Usage,
    "PendingView": models.Pending,
    "PendingCallView": models.PendingCall,
    "ApprovalView": models.Approval,
    "PolicyView": models.PolicyJudgement,
    "EventView": models.Event,
}


def types(schema: dict[str, Any], defs: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema admits (a reference: its target's, an
    object's unless it is an enumeration)."""
    if "anyOf" in schema:
        return set().union(*(types(s, defs) for s in schema["anyOf"]))
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[1]]
        return {target["type"]} if "enum" in target else {"object"}
    if "additionalProperties" in schema:
        return {"object"}
    kind = schema.get("type")
    if kind is None:  # JsonValue: anything
        return {"any"}
    return {kind}


def shape(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, tuple[set[str], bool]]:
    required = set(schema.get("required", ()))
    return {name: (types(p, defs), name in required) for name, p in schema["properties"].items()}


def client_shape(model: type[BaseModel]) -> dict[str, tuple[set[str], bool]]:
    schema = model.model_json_schema(mode="validation")
    return shape(schema, schema.get("$defs", {}))


@pytest.fixture
def components(api: Api) -> dict[str, Any]:
    found: dict[str, Any] = api.client.get("/openapi.json").json()["components"]["schemas"]
    return found


@pytest.mark.parametrize("served", sorted(SERVED))
def test_each_model_is_the_served_one(components: dict[str, Any], served: str) -> None:
    assert shape(components[served], components) == client_shape(SERVED[served])


def test_the_check_sees_a_drifted_field(components: dict[str, Any]) -> None:
    class Drifted(models.Usage):
        cached_tokens: int

    assert shape(components["UsageView"], components) != client_shape(Drifted)
