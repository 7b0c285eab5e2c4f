"""What the service's use cases answer and raise, and the ports it publishes through."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import JsonValue

from airlock.loop.errors import AirlockError
from airlock.persistence.domain import Reclaimed, RunStatus
from airlock.workers.service.segments import EventType


class Enqueue(Protocol):
    def __call__(self, run_id: str, delay: float | None = None) -> None:
        """Publish a wake-up for the run. Losing it is safe: the sweeper re-sends."""


class Notify(Protocol):
    def __call__(self, event_type: EventType, run_id: str) -> None:
        """Wake a deliverer of the outbox: a notification of this type was just recorded
        for the run. Losing it is safe: the beat delivers what is due."""


class ConflictError(AirlockError):
    """The run is not in a state that allows this."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired
        """The approval expired before the decision came."""


class IdempotencyMismatchError(ConflictError):
    """The caller used this idempotency key for another request (another agent, input,
    metadata or requester)."""


@dataclass(frozen=True)
class DecisionResult:
    """``recorded``: this request won (202). ``partial``: this principal's approval was
    recorded, more are needed (200). ``duplicate``: the same decision (or this
    principal's same approval) was already applied (200). ``withdrawn``: this
    principal's approval was withdrawn (200)."""

    result: Literal["recorded", "partial", "duplicate", "withdrawn"]
    decision: dict[str, JsonValue]
    approver: str | None
    approved_by: tuple[str, ...] = ()
    """With a quorum: the principals that approved this decision so far."""
    quorum: int = 1
    grants: tuple[str, ...] = ()
    """When the decision asked for standing grants: those this principal gave on this
    turn (none when the turn was decided already, by another request)."""
    agent: str | None = None
    """The run's agent, when the request was judged on the turn the run waited on."""
    suspended_at: datetime | None = None
    """When the run began to wait on that turn (for the wait's metric and span)."""
    trace_context: str | None = None
    """The run's span context (for the wait's span)."""


@dataclass(frozen=True)
class SweepReport:
    requeued_stale: tuple[str, ...]
    reclaimed: Reclaimed


SWEEPER = "sweep"
"""The beat job whose last run tells whether a beat is alive."""


class SweeperState(StrEnum):
    NEVER = "never"
    """No sweep is recorded in this database yet (no beat ran against it)."""
    OK = "ok"
    STALE = "stale"
    """None for ``stale_after``: beat, the broker or every worker is down."""


@dataclass(frozen=True)
class SweeperHealth:
    """When the sweeper last ran, and whether that is too long ago: ``never`` (no beat
    has run against this database yet), ``stale`` (none for ``stale_after``) or ``ok``."""

    last_run: datetime | None
    at: datetime
    stale_after: timedelta

    @property
    def age_seconds(self) -> float | None:
        return None if self.last_run is None else (self.at - self.last_run).total_seconds()

    @property
    def state(self) -> SweeperState:
        if self.last_run is None:
            return SweeperState.NEVER
        return SweeperState.STALE if self.at - self.last_run > self.stale_after else SweeperState.OK


def stale_after(sweep_interval: timedelta) -> timedelta:
    """A sweeper silent this long is stale: a few missed runs, and never under a minute
    (a beat restarting, or a slow sweep, is not yet a dead beat)."""
    return max(4 * sweep_interval, timedelta(minutes=1))


@dataclass(frozen=True)
class Stats:
    runs: dict[RunStatus, int]
    oldest_waiting: datetime | None
    """When the longest-waiting run started waiting."""
    expired_leases: int
    finished: dict[int, dict[RunStatus, int]]
    """Runs finished within the last N minutes, by status, for each N asked."""
    notifications_due: int
    notifications_given_up: int
    notification_lag: tuple[float, float] | None
    """p50 and p99 seconds from a transition to its notification's 2xx, over the last
    notifications delivered (``None``: none was)."""
    at: datetime
    sweeper: SweeperHealth

    @property
    def oldest_waiting_seconds(self) -> float | None:
        if self.oldest_waiting is None:
            return None
        return (self.at - self.oldest_waiting).total_seconds()
