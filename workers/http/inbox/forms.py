"""The inbox's forms: a call's edit form made from its tool's JSON schema, and the
decision a submitted form makes (``DecisionBody``, the same as the webhook's)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue, ValidationError

from airlock.loop import Agent, PendingCall
from airlock.loop.errors import AirlockError
from airlock.workers.service.decisions import DecisionBody, refuse_unstorable

SIMPLE = {"string", "integer", "number", "boolean"}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    """``string``, ``integer``, ``number``, ``boolean`` or ``json`` (anything else)."""
    required: bool
    value: str
    """As the input shows it (JSON for ``json``)."""
    long: bool = False


class FormError(AirlockError, ValueError):
    """The form does not make a decision (422, shown on the page)."""


def fields_of(agent: Agent | None, call: PendingCall) -> list[Field]:
    """The edit form of a call: one input per property of its tool's schema, filled
    with the model's arguments."""
    tool = agent.tool(call.name) if agent is not None else None
    schema: Mapping[str, Any] = tool.schema().parameters if tool is not None else {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    names = list(properties) or list(call.arguments)
    found: list[Field] = []
    for name in names:
        kind = _kind(properties.get(name) or {})
        value = call.arguments.get(name, (properties.get(name) or {}).get("default"))
        shown = value if isinstance(value, str) and kind == "string" else _shown(value, kind)
        found.append(Field(name, kind, name in required, shown, len(shown) > 80 or "\n" in shown))
    return found


def _kind(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type")
    return kind if isinstance(kind, str) and kind in SIMPLE else "json"


def _shown(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if kind == "boolean":
        return "true" if value else ""
    if kind in ("integer", "number"):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def edited(fields: list[Field], form: Mapping[str, str], prefix: str) -> dict[str, JsonValue]:
    """The arguments an edit form holds. Raises ``FormError`` naming the field."""
    arguments: dict[str, JsonValue] = {}
    for f in fields:
        raw = form.get(f"{prefix}{f.name}")
        if f.kind == "boolean":
            arguments[f.name] = raw is not None
            continue
        if raw is None or (raw == "" and f.kind != "string"):
            if f.required:
                raise FormError(f"{f.name} is required")
            continue
        try:
            arguments[f.name] = _parsed(raw, f.kind)
        except ValueError as exc:
            raise FormError(f"{f.name}: {exc}") from exc
    return arguments


def _parsed(raw: str, kind: str) -> JsonValue:
    match kind:
        case "string":
            return raw
        case "integer":
            if not raw.strip().lstrip("-").isdigit():
                raise ValueError("must be a whole number")
            return int(raw)
        case "number":
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError("must be a finite number")
            return number
        case _:
            try:
                return _json(raw)
            except RecursionError as exc:  # deeper than Python's recursion limit
                raise ValueError("is nested too deeply") from exc


def _json(raw: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"is not JSON: {exc}") from exc
    refuse_unstorable(value, "the value")
    return value


def decision_of(
    form: Mapping[str, str], calls: list[PendingCall], forms: Mapping[str, list[Field]]
) -> DecisionBody:
    """The decision a submitted run page makes: the whole turn's (approve or deny),
    and per call approve / deny / edit where one was chosen. A deny needs a reason.
    Raises ``FormError``."""
    whole = form.get("decision")
    if whole == "withdraw":  # the signed-in approver's own approval, taken back
        try:
            return DecisionBody(turn_digest=form.get("turn_digest") or "", decision="withdraw")
        except ValidationError as exc:
            raise FormError("the page is out of date: reload it") from exc
    if whole not in ("approve", "deny"):
        raise FormError("choose approve or deny for the turn")
    reason = (form.get("reason") or "").strip() or None
    if whole == "deny" and reason is None:
        raise FormError("a deny needs a reason: the model is told")
    per_call: dict[str, dict[str, JsonValue]] = {}
    for call in calls:
        choice = form.get(f"call.{call.id}") or ""
        if choice in ("", whole) and choice != "edit":
            continue
        if choice not in ("approve", "deny", "edit"):
            raise FormError(f"unknown choice {choice!r} for call {call.id}")
        entry: dict[str, JsonValue] = {"decision": choice}
        if choice == "deny":
            why = (form.get(f"reason.{call.id}") or "").strip() or reason
            if why is None:
                raise FormError(f"denying call {call.id} needs a reason")
            entry["reason"] = why
        if choice == "edit":
            entry["arguments"] = edited(forms[call.id], form, f"edit.{call.id}.")
        per_call[call.id] = entry
    body: dict[str, Any] = {
        "turn_digest": form.get("turn_digest") or "",
        "decision": whole,
        "reason": reason,
    }
    if per_call:
        body["calls"] = per_call
    body |= _grant(form)
    try:
        return DecisionBody.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors(include_url=False))
        raise FormError(problems) from exc


def _grant(form: Mapping[str, str]) -> dict[str, Any]:
    """A standing grant of what the decision approves as asked, if one was chosen
    (``GrantBody`` checks it)."""
    scope = form.get("grant_scope") or ""
    if not scope:
        return {}
    return {"grant": {"scope": scope, "expires_in": form.get("grant_for") or "1h"}}
