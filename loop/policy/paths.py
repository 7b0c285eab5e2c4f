"""JSON paths into a call's arguments (``amount``, ``customer.id``, ``items[0].sku``)
and the JSON types a tool's schema declares at them."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from pydantic import JsonValue

from airlock.loop.errors import AirlockError

_PART = re.compile(r"([A-Za-z_][A-Za-z0-9_\-]*)|\[(\d+)\]")


class MissingArgumentError(AirlockError):
    """The path leads nowhere in the arguments."""


def parse_path(path: object) -> tuple[str | int, ...]:
    """``amount`` → ("amount",); ``$.items[0].sku`` → ("items", 0, "sku"). Raises
    ``ValueError``."""
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty string such as amount or items[0].sku")
    text = path[2:] if path.startswith("$.") else path
    parts: list[str | int] = []
    position = 0
    while position < len(text):
        if text[position] == "." and parts:
            position += 1
        found = _PART.match(text, position)
        if found is None:
            raise ValueError(f"path {path!r} is not a.b[0].c")
        parts.append(found.group(1) if found.group(1) else int(found.group(2)))
        position = found.end()
    return tuple(parts)


def lookup(arguments: Mapping[str, JsonValue], parts: tuple[str | int, ...]) -> JsonValue:
    """The value at ``parts``; raises ``MissingArgumentError``."""
    node: JsonValue = dict(arguments)
    for part in parts:
        if isinstance(part, str) and isinstance(node, dict) and part in node:
            node = node[part]
            continue
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            node = node[part]
            continue
        raise MissingArgumentError(".".join(str(p) for p in parts))
    return node


def json_type(value: JsonValue) -> str:
    """The JSON type of a value: ``"100"`` is a string, ``1e3`` a number, NaN none."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number" if math.isfinite(value) else "non-finite number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "array" if isinstance(value, list) else "object"


def fits(value: JsonValue, declared: frozenset[str]) -> bool:
    """Whether the value's JSON type is one the schema declares (an integer is a number;
    a number with no fraction is an integer, as JSON Schema says)."""
    kind = json_type(value)
    if kind in declared:
        return True
    if kind == "integer" and "number" in declared:
        return True
    return isinstance(value, float) and "integer" in declared and value.is_integer()


def declared_types(schema: Mapping[str, JsonValue], parts: tuple[str | int, ...]) -> frozenset[str]:
    """The JSON types the schema declares at ``parts``; empty when it declares none (any
    value then stands on its own JSON type)."""
    nodes: list[JsonValue] = [_resolve(schema, dict(schema))]
    for part in parts:
        nodes = [child for node in nodes for child in _children(schema, node, part)]
    return frozenset(t for node in nodes for t in _types(schema, node))


def _resolve(root: Mapping[str, JsonValue], node: JsonValue) -> JsonValue:
    ref = node.get("$ref") if isinstance(node, dict) else None
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        defs = root.get("$defs")
        if isinstance(defs, dict):
            return _resolve(root, defs.get(ref.removeprefix("#/$defs/"), {}))
    return node


def _branches(root: Mapping[str, JsonValue], node: JsonValue) -> list[JsonValue]:
    node = _resolve(root, node)
    if not isinstance(node, dict):
        return []
    found: list[JsonValue] = [node]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            found.extend(b for branch in branches for b in _branches(root, branch))
    return found


def _children(root: Mapping[str, JsonValue], node: JsonValue, part: str | int) -> list[JsonValue]:
    found: list[JsonValue] = []
    for branch in _branches(root, node):
        assert isinstance(branch, dict)
        if isinstance(part, str):
            properties = branch.get("properties")
            if isinstance(properties, dict) and part in properties:
                found.append(properties[part])
        elif "items" in branch:
            found.append(branch["items"])
    return found


def _types(root: Mapping[str, JsonValue], node: JsonValue) -> list[str]:
    types: list[str] = []
    for branch in _branches(root, node):
        assert isinstance(branch, dict)
        declared = branch.get("type")
        if isinstance(declared, str):
            types.append(declared)
        elif isinstance(declared, list):
            types.extend(t for t in declared if isinstance(t, str))
    return types
