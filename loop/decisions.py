"""What an operator (or a policy) decides about a call that waits for approval."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal, TypeAlias

from pydantic import Field

from airlock.loop.messages import JsonObject


@dataclass(frozen=True, slots=True)
class Approve:
    kind: Literal["approve"] = "approve"


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str = ""
    kind: Literal["deny"] = "deny"


@dataclass(frozen=True, slots=True)
class Edit:
    """Approve the call, but run it with these arguments instead."""

    arguments: JsonObject
    kind: Literal["edit"] = "edit"


@dataclass(frozen=True, slots=True)
class Ask:
    """A policy verdict: leave the call to a person."""

    kind: Literal["ask"] = "ask"


Decision: TypeAlias = Annotated[Approve | Deny | Edit, Field(discriminator="kind")]
PolicyVerdict: TypeAlias = Approve | Deny | Ask
CallDecision: TypeAlias = Approve | Deny | Edit
Decisions: TypeAlias = Approve | Deny | Mapping[str, CallDecision]
"""A turn's decision: one for the whole turn, or one per call id."""
