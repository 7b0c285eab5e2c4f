"""``DecisionSeen``: what a decision request came to, as the process's watchers are told
(``airlock.workers.service.watching``); a value of its own, so the traces can take it
without standing on the service's results."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


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
