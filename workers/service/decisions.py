"""The decision payload every path shares (webhook, CLI, Python API), and its mapping
to the loop's decisions."""

from __future__ import annotations

import math
from typing import Literal, assert_never

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator

from airlock.loop import Approve, DecisionError, Deny, Edit, SuspendedRunState
from airlock.loop.decisions import Decisions
from airlock.loop.durations import duration_seconds
from airlock.workers.service.principals import check_name

CallDecisionKind = Literal["approve", "deny", "edit"]


MAX_DEPTH = 100
"""How deep a value nests at most (arrays and objects): deeper, no reader (the
serializer of a run's state stops at 255) could take it back."""
BODY_LEVELS = 10
"""How deep a decision body holds a call's arguments, at most (with room to spare)."""


def refuse_unstorable(
    value: object, where: str = "body", depth: int = 0, limit: int = MAX_DEPTH
) -> None:
    """Refuse what no reader of the run could take back: text UTF-8 cannot hold (a lone
    surrogate, from a ``\\ud800`` escape), numbers JSON cannot (NaN, Infinity, or a
    literal too large for a float, as 1e999, which the parsers read as Infinity) and
    nesting deeper than ``limit``. Stored, any would break every reader of the run.
    Raises ``ValueError`` (422)."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError as exc:
            raise ValueError(f"{where} holds a lone surrogate (not valid Unicode text)") from exc
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is not a finite number (JSON holds no NaN or Infinity)")
    elif isinstance(value, dict | list | tuple) and depth >= limit:
        raise ValueError(f"{where} nests deeper than {limit} levels")
    elif isinstance(value, dict):
        for key, item in value.items():
            refuse_unstorable(key, where, depth + 1, limit)
            refuse_unstorable(item, f"{where}.{key}", depth + 1, limit)
    elif isinstance(value, list | tuple):
        for item in value:
            refuse_unstorable(item, where, depth + 1, limit)


class TextBody(BaseModel):
    @model_validator(mode="after")
    def _valid_text(self) -> TextBody:
        # the body wraps a call's arguments a few levels deep (calls.<id>.arguments): any
        # arguments a run holds can be edited
        refuse_unstorable(self.model_dump(), "body", limit=MAX_DEPTH + BODY_LEVELS)
        return self


class CallDecisionBody(TextBody):
    model_config = ConfigDict(extra="forbid")
    decision: CallDecisionKind
    arguments: dict[str, JsonValue] | None = None
    reason: str | None = Field(default=None, max_length=2000)


MAX_GRANT_SECONDS = 30 * 86400
"""The longest a standing grant may stand (30 days)."""


def grant_seconds(value: object) -> float:
    """How long a grant of ``value`` stands, in seconds; ValueError saying what is
    wrong with it (no duration, or longer than 30 days)."""
    seconds = duration_seconds(value)
    if seconds is None:
        raise ValueError('a duration is a positive number of seconds or "30m", "8h", "2d"')
    if not seconds <= MAX_GRANT_SECONDS:  # inf too: a number no float holds
        raise ValueError("a standing grant stands for at most 30 days")
    return seconds


class GrantBody(BaseModel):
    """``{scope, expires_in}``: the decision's approval of each call it approves as
    asked stands for ``expires_in`` (seconds, or ``"30m"``, ``"8h"``, ``"2d"``; at most
    30 days): for a repeat of exactly the same call by the agent (``call``), or for any
    call of the same tool in this run (``run``)."""

    model_config = ConfigDict(extra="forbid")
    scope: Literal["call", "run"]
    expires_in: int | str

    @field_validator("expires_in", mode="before")
    @classmethod
    def _not_a_bool(cls, value: object) -> object:
        if isinstance(value, bool):  # JSON true is no number of seconds (nor 1)
            raise ValueError('expires_in is seconds or "30m", "8h", "2d"')
        return value

    @field_validator("expires_in")
    @classmethod
    def _duration(cls, value: int | str) -> int | str:
        grant_seconds(value)
        return value

    @property
    def seconds(self) -> float:
        seconds = duration_seconds(self.expires_in)
        assert seconds is not None, "validated"
        return seconds


class DecisionBody(TextBody):
    """``{turn_digest, decision, reason?, approver?, calls?}``: what an approver sends.
    ``withdraw`` takes back the sender's approval toward a quorum (never stored as a
    decision)."""

    model_config = ConfigDict(extra="forbid")
    turn_digest: str = Field(min_length=64, max_length=64, pattern="^[0-9a-f]{64}$")
    decision: Literal["approve", "deny", "withdraw"]
    reason: str | None = Field(default=None, max_length=2000)
    approver: str | None = Field(default=None, max_length=200)
    calls: dict[str, CallDecisionBody] | None = None
    grant: GrantBody | None = None
    """A standing grant of the calls it approves as asked (never part of the decision
    recorded: ``stored``)."""

    @field_validator("approver")
    @classmethod
    def _approver(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "approver")

    @model_validator(mode="after")
    def _withdrawal(self) -> DecisionBody:
        if self.decision == "withdraw" and self.calls:
            raise ValueError("a withdrawal takes back a whole approval: it names no calls")
        if self.grant is not None and self.decision != "approve":
            approving = any(c.decision == "approve" for c in (self.calls or {}).values())
            if not approving:
                raise ValueError("a standing grant is given with an approval")
        return self

    def stored(self) -> dict[str, JsonValue]:
        """The decision as recorded; two requests with equal ``stored()`` are the same decision."""
        payload: dict[str, JsonValue] = {"decision": self.decision, "reason": self.reason}
        if self.calls:
            payload["calls"] = {
                call_id: c.model_dump(mode="json", exclude_none=True)
                for call_id, c in sorted(self.calls.items())
            }
        return payload


def to_loop_decisions(stored: dict[str, JsonValue], state: SuspendedRunState) -> Decisions:
    body = DecisionBody.model_validate({"turn_digest": state.turn_digest, **stored})
    whole: Approve | Deny = (
        Approve() if body.decision == "approve" else Deny(reason=body.reason or "")
    )
    if not body.calls:
        return whole
    decisions: dict[str, Approve | Deny | Edit] = {
        call.id: whole
        for call in state.pending_calls
        if call.id not in body.calls and call.preset_source != "policy"
    }
    for call_id, call in body.calls.items():
        decisions[call_id] = _one(call_id, call)
    return decisions


def _one(call_id: str, call: CallDecisionBody) -> Approve | Deny | Edit:
    match call.decision:
        case "approve":
            return Approve()
        case "deny":
            return Deny(reason=call.reason or "")
        case "edit":
            if call.arguments is None:
                raise DecisionError(f"edit of call {call_id} gives no arguments")
            return Edit(arguments=call.arguments)
        case _:
            assert_never(call.decision)
