"""The values the store hands out. ORM rows never leave `persistence/`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import JsonValue

from airlock.loop import Usage

# re-exported: they live where the `airlock` command reads them without this module's imports
from airlock.persistence.status import ACTIVE as ACTIVE  # noqa: PLC0414
from airlock.persistence.status import TERMINAL as TERMINAL  # noqa: PLC0414
from airlock.persistence.status import GrantScope as GrantScope  # noqa: PLC0414
from airlock.persistence.status import RunStatus as RunStatus  # noqa: PLC0414


class CallStatus(StrEnum):
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Run:
    id: str
    agent: str
    status: RunStatus
    termination: str | None
    input: str
    output: str | None
    error: str | None
    iterations: int
    usage: Usage
    turn_digest: str | None
    has_checkpoint: bool
    suspended_at: datetime | None
    expires_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    attempts: int
    idempotency_key: str | None
    metadata: dict[str, JsonValue]
    created_at: datetime
    updated_at: datetime
    version: int
    requested_by: str | None = None
    caller: str | None = None
    """Who created it, as its idempotency key is scoped (``oidc:<issuer>:<sub>``,
    ``token``, ``cli``, ``api``)."""
    trace_context: str | None = None
    """The run's span context (a W3C ``traceparent``), when traces are on."""
    checkpoint: str | None = field(default=None, repr=False, compare=False)
    """The sealed checkpoint as read with the row (by ``claim``, and for a waiting
    run by every read); open it with ``Runs.load_state``."""
    unreadable: str | None = None
    """Why a sealed column of the run (read as empty) could not be opened."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What a segment needs of the run it claimed: the claim reads no more than this,
    as the first statement of every segment. The rest of the row is ``Runs.get``
    away."""

    id: str
    agent: str
    input: str
    attempts: int
    """Claims of this segment so far, this one included."""
    turn_digest: str | None
    ledger: bool = True
    """The run had calls in its ledger when it was claimed. Without any, no call of
    this segment can have a recorded result to replay."""
    checkpoint: str | None = field(default=None, repr=False, compare=False)
    """The sealed checkpoint (the state of the last suspension, or of a failed run's last
    one); open it with ``Runs.load_state``."""
    unreadable: str | None = None
    """Why the input (read as empty) could not be opened: the segment fails the run."""
    decision: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """The decision recorded for ``turn_digest``, as stored (sealed); open it with
    ``Decisions.opened``. None when the run did not wait on a turn, or none was decided."""
    approver: str | None = None
    """Who made that decision."""
    trace_context: str | None = None
    """The run's span context: its segments are spans of that trace."""

    @property
    def has_checkpoint(self) -> bool:
        return self.checkpoint is not None


@dataclass(frozen=True, slots=True)
class RunEvent:
    run_id: str
    seq: int
    kind: str
    payload: dict[str, JsonValue]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class StreamHead:
    """How far a run's audit stream goes, and the run's status: what a live stream
    of the run needs to know whether it has more to send, or is done."""

    run_id: str
    status: RunStatus
    last_seq: int


@dataclass(frozen=True, slots=True)
class WaitingMark:
    """A mark of the waiting queue that changes whenever a run enters or leaves it, or a
    waiting run is written: how many wait, the time of the latest such write, and how
    many there were (kept by the transitions: reading it reads no run)."""

    count: int
    changed_at: datetime | None
    changes: int


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    run_id: str
    call_id: str
    tool: str
    effect: str
    status: CallStatus
    result: str | None
    is_error: bool
    attempts: int
    started_by: str | None = None
    """The lease owner of the segment that started it (a call that acts)."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A read-only call that ran, to be recorded in the ledger with its result, in the
    same statement as the run's next events (a read changes nothing, so its record can
    wait as its events do)."""

    call_id: str
    tool: str
    effect: str
    arguments: dict[str, JsonValue]
    result: str
    is_error: bool
    started_at: datetime
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    run_id: str
    turn_digest: str
    decision: dict[str, JsonValue]
    approver: str | None
    webhook_id: str | None
    created_at: datetime
    identity: str | None = None
    """Who made it (``Principal.key``); ``approver`` is the name shown."""


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One principal's approval of a turn that needs a quorum."""

    run_id: str
    turn_digest: str
    principal: str
    """The name shown."""
    auth: dict[str, JsonValue]
    decision: dict[str, JsonValue]
    proposal: str
    webhook_id: str | None
    created_at: datetime
    identity: str = ""
    """Who approved (``Principal.key``): one approval per identity and turn."""


@dataclass(frozen=True, slots=True)
class DecisionOutcome:
    """What recording a decision (or a principal's approval toward a quorum) did.

    ``recorded``: this request won and moved the run to ``queued``.
    ``partial``: this principal's approval was recorded; the quorum is not reached yet.
    ``duplicate``: the same decision (or webhook id, or this principal's same approval)
    was already applied; ``stored`` is the decision, if one was made.
    ``withdrawn``: this principal's approval was withdrawn before the quorum was reached.
    ``conflict``: the run is not waiting, the digest is of another turn, or another
    decision already won (``reason`` says which). ``not_found``: no such run.
    """

    result: Literal["recorded", "partial", "duplicate", "withdrawn", "conflict", "not_found"]
    stored: DecisionRecord | None = None
    reason: str | None = None
    expired: bool = False
    """A conflict because the approval expired before the decision came."""
    approved_by: tuple[str, ...] = ()
    """With a quorum: the principals whose approvals of this decision are recorded."""


@dataclass(frozen=True, slots=True)
class Page:
    runs: tuple[Run, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Reclaimed:
    requeued: tuple[str, ...]
    failed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """A standing grant (see ``airlock.persistence.models.GrantRow``)."""

    id: str
    agent: str
    tool: str
    scope: GrantScope
    run_id: str | None
    arguments: dict[str, JsonValue] | None
    granted_by: str
    auth: dict[str, JsonValue]
    reason: str | None
    source: dict[str, JsonValue]
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None
    uses: int
    last_used_at: datetime | None

    def live(self, now: datetime) -> bool:
        return self.revoked_at is None and self.expires_at > now

    def state(self, now: datetime) -> Literal["active", "revoked", "expired"]:
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.expires_at > now else "expired"


@dataclass(frozen=True, slots=True)
class Release:
    """What a standing grant would release: the grants covering every asking call of a
    turn, the decision they make and its audit event."""

    grant_ids: tuple[str, ...]
    approver: str
    decision: dict[str, JsonValue]
    event: dict[str, JsonValue]
