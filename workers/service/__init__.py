"""The service room: the use cases (``core``: start, segment, decide, cancel, expire,
purge) and what they stand on (the segments and their leases, the ledger, decisions,
principals, the registry of agents, the settings, the broker wake-ups are published
to, and ``wiring``, which builds the process's one ``Service``). It imports no door
(``airlock.workers.http``, ``airlock.workers.tasks``, ``airlock.workers.cli``): import-linter holds
it to that.

Its public names (the ``Service`` and what its use cases answer and raise) are
re-exported here, each imported when first used: a module of the room
(``airlock.workers.service.settings``) costs only what it imports itself, so the
``airlock`` command reads its settings without loading every use case."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.workers.service.core import Service
    from airlock.workers.service.outbound import (
        MAX_DELIVERIES,
        DeliveryError,
        DeliveryReport,
        Retries,
    )
    from airlock.workers.service.principals import ForbiddenError, Principal
    from airlock.workers.service.results import (
        ConflictError,
        DecisionResult,
        Enqueue,
        IdempotencyMismatchError,
        Notify,
        Stats,
        SweeperHealth,
        SweeperState,
        SweepReport,
    )
    from airlock.workers.service.segments import (
        EventType,
        Limits,
        Outcome,
        SegmentInterruptedError,
        SegmentResult,
        is_database_error,
    )

_FROM = {
    "Service": "core",
    **dict.fromkeys(("MAX_DELIVERIES", "DeliveryError", "DeliveryReport", "Retries"), "outbound"),
    **dict.fromkeys(("ForbiddenError", "Principal"), "principals"),
    **dict.fromkeys(
        ("ConflictError", "DecisionResult", "Enqueue", "IdempotencyMismatchError", "Notify",
         "Stats", "SweeperHealth", "SweeperState", "SweepReport"),
        "results",
    ),
    **dict.fromkeys(
        ("EventType", "Limits", "Outcome", "SegmentInterruptedError", "SegmentResult",
         "is_database_error"),
        "segments",
    ),
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_DELIVERIES",
    "ConflictError",
    "DecisionResult",
    "DeliveryError",
    "DeliveryReport",
    "Enqueue",
    "EventType",
    "ForbiddenError",
    "IdempotencyMismatchError",
    "Limits",
    "Notify",
    "Outcome",
    "Principal",
    "Retries",
    "SegmentInterruptedError",
    "SegmentResult",
    "Service",
    "Stats",
    "SweepReport",
    "SweeperHealth",
    "SweeperState",
    "is_database_error",
]
