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
from airlock.workers.service.seen import DecisionSeen

log = logging.getLogger("airlock")

__all__ = ["REFUSALS", "DecisionSeen", "DecisionWatcher", "Watchers", "refusal", "seen_of"]

REFUSALS = (UnknownRunError, ConflictError, DecisionError, ForbiddenError)
"""What a decision request is refused with (its ``outcome`` says which)."""


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
