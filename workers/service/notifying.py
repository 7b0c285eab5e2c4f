"""The use cases of the outbox: the notifications a ``Service`` records and delivers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta

from pydantic import JsonValue

from airlock.persistence.domain import Run
from airlock.persistence.store.outbox import Notification
from airlock.workers.service.outbound import (
    DEFAULT_RETRIES,
    TAKE_FOR,
    DeliveryReport,
    Retries,
    Send,
    deliver,
    deliver_due,
)
from airlock.workers.service.reads import Reads
from airlock.workers.service.segments import EventType
from airlock.workers.service.tracing import Traces


class Notifying(Reads):
    """What ``Service`` does with the outbox (it provides the fields)."""

    traces: Traces

    def add_notification(self, run_id: str, event_type: EventType) -> None:
        """A notification caused outside a transition (one an earlier version queued)."""
        self.store.outbox.add(run_id, event_type)

    def deliver_notifications(
        self,
        send: Send,
        render: Callable[[Run], JsonValue],
        *,
        limit: int = 100,
        retries: Retries = DEFAULT_RETRIES,
    ) -> DeliveryReport:
        """Deliver the notifications that are due (see ``outbound.deliver_due``)."""
        return deliver_due(
            self.store, send, lambda run_id: render(self.get_run(run_id)), limit, retries,
            traced=self._traced,
        )  # fmt: skip

    def claim_notifications(self, limit: int, lease: timedelta = TAKE_FOR) -> list[Notification]:
        """Claim up to ``limit`` due notifications, each for one attempt, held ``lease``
        (longer than an attempt: see ``OutboxStore.claim``)."""
        return self.store.outbox.claim(limit, lease)

    def deliver_notification(
        self,
        taken: Notification,
        send: Send,
        render: Callable[[Run], JsonValue],
        retries: Retries = DEFAULT_RETRIES,
    ) -> bool:
        """One attempt at a claimed notification (see ``outbound.deliver``)."""
        return deliver(
            self.store, taken, send, lambda run_id: render(self.get_run(run_id)), retries,
            traced=self._traced,
        )  # fmt: skip

    def _traced(self, run_id: str) -> Mapping[str, str]:
        """The ``traceparent`` of the run's trace, for its notifications (read only when
        traces are on)."""
        if self.traces.provider is None:
            return {}
        run = self.store.runs.get(run_id)
        return self.traces.headers(run.trace_context if run else None)
