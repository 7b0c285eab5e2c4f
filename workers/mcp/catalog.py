"""What a server offers, as Airlock sees it: each tool's full name, its effect (the
operator's word first) and its fingerprint (what was reviewed)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import JsonValue

from airlock.loop import Effect, ToolContext
from airlock.loop.canonical import sha256_hex
from airlock.workers.mcp.config import ServerConfig

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What the model APIs accept as a tool's name (OpenAI's and Anthropic's rule)."""
SEPARATOR = "__"


class BadToolError(ValueError):
    """A server's tool that cannot be offered to a model (its name or schema)."""


@dataclass(frozen=True, slots=True)
class Definition:
    """A tool as its server lists it: what the fingerprint covers."""

    name: str
    description: str
    input_schema: dict[str, JsonValue]
    annotations: dict[str, JsonValue] | None

    def fingerprint(self) -> str:
        return sha256_hex(self.as_json())

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, JsonValue]) -> Definition:
        schema, annotations = raw.get("input_schema"), raw.get("annotations")
        return cls(
            str(raw.get("name", "")),
            str(raw.get("description") or ""),
            dict(schema) if isinstance(schema, dict) else {},
            dict(annotations) if isinstance(annotations, dict) else None,
        )


def full_name(server: str, tool: str) -> str:
    """``bank__transfer``; ``BadToolError`` when a model API would refuse it (a tool's
    own name is never rewritten: a name that maps to another could call the wrong tool)."""
    name = f"{server}{SEPARATOR}{tool}"
    if not tool or SEPARATOR in tool or not TOOL_NAME.fullmatch(name):
        raise BadToolError(
            f"tool {tool!r} of server {server!r} is not offered: its name must be letters, "
            f"digits, '_' and '-' without '__', and {server}__<tool> at most 64 characters"
        )
    return name


def split_name(name: str) -> tuple[str, str]:
    server, _, tool = name.partition(SEPARATOR)
    return server, tool


def check_schema(definition: Definition) -> None:
    """An input schema a model can use: a JSON Schema object (``type: object``)."""
    schema = definition.input_schema
    if schema.get("type") != "object":
        raise BadToolError(
            f"tool {definition.name!r} is not offered: its input schema is not a JSON Schema "
            'object ("type": "object")'
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(
        isinstance(v, dict) for v in properties.values()
    ):
        raise BadToolError(
            f"tool {definition.name!r} is not offered: its input schema's properties are "
            "not a table of schemas"
        )


def decide_effect(server: ServerConfig, definition: Definition) -> Effect:
    """The operator's declaration; else, only with ``trust_annotations``, the server's
    annotations; else ``write`` (an undeclared MCP tool always asks)."""
    declared = server.tools.get(definition.name)
    if declared is not None:
        return declared.effect
    if server.trust_annotations and definition.annotations is not None:
        return _annotated(definition.annotations)
    return Effect.WRITE


def _annotated(annotations: Mapping[str, JsonValue]) -> Effect:
    if annotations.get("readOnlyHint") is True:
        return Effect.READ
    if annotations.get("idempotentHint") is True:  # repeating it changes nothing more
        return Effect.IDEMPOTENT_WRITE
    return Effect.WRITE


@runtime_checkable
class KeepsContent(Protocol):
    def take_content(self, ctx: ToolContext) -> list[JsonValue]:
        """The blocks other than text of the call's answer, taken once."""


def upstream_of(tool: object) -> tuple[ServerConfig, Definition] | None:
    """The server and definition of an MCP tool (``McpTool``), None for any other tool
    (without importing the SDK, which only MCP tools need)."""
    server, definition = getattr(tool, "server", None), getattr(tool, "definition", None)
    if isinstance(server, ServerConfig) and isinstance(definition, Definition):
        return server, definition
    return None
