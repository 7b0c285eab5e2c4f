"""What a decision request came to, for whoever watches the process's decisions (its
metrics, its traces): every door's decision passes ``Service.record_decision``, and
the expiry its own path, so both tell the watchers here and no door counts on its own."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pydantic import JsonValue

from airlock.loop import DecisionError
from airlock.persistence.store import UnknownRunError
from airlock.workers.service.principals import ForbiddenError, Principal
from airlock.workers.service.results import ConflictError, DecisionResult

log = logging.getLogger("airlock")

REFUSALS = (UnknownRunError, ConflictError, DecisionError, ForbiddenError)
"""What a decision request is refused with (its ``outcome`` says which)."""


@dataclass(frozen=True)
class DecisionSeen:
    """A decision request as it ended. ``door``: the principal's ``source`` (``webhook``,
    ``oidc``, ``inbox``, ``cli``, ``api``, ``grant``, ``expiry``); ``outcome``: what the
    request came to (``recorded``, ``partial``, ``duplicate``, ``withdrawn``, or the
    refusal: ``conflict``, ``expired``, ``forbidden``, ``not_found``, ``invalid``).
    When it ended a wait (``recorded``, or an expiry): the run's ``agent``, what the wait
    ended with (``verdict``: ``approved``, ``denied``, ``mixed``, ``expired``), and when
    the wait began and ended."""

    run_id: str
    door: str
    outcome: str
    principal: str | None = None
    agent: str | None = None
    verdict: str | None = None
    suspended_at: datetime | None = None
    decided_at: datetime | None = None
    quorum: int = 1
    approved_by: tuple[str, ...] = ()
    trace_context: str | None = None
    """The run's span context: the wait's span is of its trace."""

    @property
    def waited(self) -> float | None:
        """Seconds from suspension to decision, for a request that ended a wait."""
        if self.suspended_at is None or self.decided_at is None:
            return None
        return max(0.0, (self.decided_at - self.suspended_at).total_seconds())


DecisionWatcher = Callable[[DecisionSeen], None]


def refusal(exc: Exception) -> str:
    """The ``outcome`` of a decision request the service refused."""
    if isinstance(exc, ConflictError):
        return "expired" if exc.expired else "conflict"
    if isinstance(exc, ForbiddenError):
        return "forbidden"
    return "not_found" if isinstance(exc, UnknownRunError) else "invalid"


def verdict_of(decision: dict[str, JsonValue]) -> str:
    """``approved``, ``denied`` or ``mixed``: a stored decision's calls (an edit approves)."""
    kinds = {decision.get("decision")}
    calls = decision.get("calls")
    if isinstance(calls, dict):
        kinds |= {c.get("decision") for c in calls.values() if isinstance(c, dict)}
    kinds = {"approve" if k == "edit" else k for k in kinds}
    if kinds == {"approve"}:
        return "approved"
    return "denied" if kinds == {"deny"} else "mixed"


def seen_of(
    run_id: str, principal: Principal, result: DecisionResult, now: datetime
) -> DecisionSeen:
    """What a decision request the service answered came to."""
    ended = result.result == "recorded"
    return DecisionSeen(
        run_id=run_id,
        door=principal.source,
        outcome=result.result,
        principal=result.approver,
        agent=result.agent if ended else None,
        verdict=verdict_of(result.decision) if ended else None,
        suspended_at=result.suspended_at if ended else None,
        decided_at=now if ended else None,
        quorum=result.quorum,
        approved_by=result.approved_by,
        trace_context=result.trace_context if ended else None,
    )


@dataclass
class Watchers:
    """The process's watchers of decisions; one that fails is logged and never fails
    the decision (recorded by then)."""

    watchers: list[DecisionWatcher]

    def add(self, watcher: DecisionWatcher) -> None:
        self.watchers.append(watcher)

    def tell(self, seen: DecisionSeen) -> None:
        for watcher in tuple(self.watchers):
            try:
                watcher(seen)
            except Exception:
                log.exception(
                    "a watcher of decisions failed",
                    extra={"action": "decision.watch_failed", "run_id": seen.run_id},
                )
