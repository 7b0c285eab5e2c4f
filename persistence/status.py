"""A run's statuses and a grant's scopes: plain values with no import beyond the
standard library, so the ``airlock`` command offers them (``--status``, ``--grant``)
before it has loaded anything else (``airlock.persistence.domain`` re-exports them)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
ACTIVE = frozenset(set(RunStatus) - TERMINAL)

GrantScope = Literal["call", "run"]
