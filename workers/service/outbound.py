"""Delivering the outbox: each due notification taken by one deliverer at a time,
sent with the same body under the same webhook-id on every attempt, retried with
backoff, given up (and kept) after the last."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from pydantic import JsonValue

from airlock.loop.errors import AirlockError
from airlock.persistence.store import RunStore
from airlock.persistence.store.outbox import Notification
from airlock.workers.service.backoff import backoff

log = logging.getLogger("airlock")


class DeliveryError(AirlockError):
    """The receiver did not accept the notification: retried later, unless ``final``
    (an answer that another attempt would not change, such as a 404)."""

    def __init__(self, message: str, *, status_code: int | None = None, final: bool = False):
        super().__init__(message)
        self.status_code = status_code
        self.final = final


Send = Callable[[str, str], int]
"""POST a notification's body under its webhook-id; the receiver's status code.
Raises ``DeliveryError`` unless the receiver accepted it (a 2xx)."""

MAX_DELIVERIES = 12
"""Tries of one notification before it is given up (kept, and counted, in the outbox):
about 40 minutes of retries with ``airlock.workers.service.backoff``'s (capped at 10 minutes)."""
TAKE_FOR = timedelta(seconds=60)
"""How long a deliverer holds a notification it took: longer than a delivery's timeout,
so no other deliverer sends it meanwhile; if the deliverer dies, it is due again."""


@dataclass(frozen=True)
class DeliveryReport:
    delivered: int = 0
    failed: int = 0


Render = Callable[[str], JsonValue]
"""A run's view, by its id, as the notification's ``data``."""


def deliver_due(store: RunStore, send: Send, render: Render, limit: int = 100) -> DeliveryReport:
    """Deliver the notifications that are due, oldest first. Each is taken by one
    deliverer at a time; every attempt sends the same body under the same webhook-id,
    and is told in the run's audit stream (``notified`` / ``notify_failed``)."""
    delivered = failed = 0
    for notification_id in store.outbox.due(limit):
        taken = store.outbox.take(notification_id, TAKE_FOR)
        if taken is None:
            continue  # another deliverer has it
        if _deliver(store, taken, send, render):
            delivered += 1
        else:
            failed += 1
    return DeliveryReport(delivered, failed)


def _deliver(store: RunStore, taken: Notification, send: Send, render: Render) -> bool:
    body = taken.body or json.dumps(
        {
            "type": taken.event_type,
            "timestamp": taken.created_at.isoformat(),  # the transition's
            "data": render(taken.run_id),
        },
        separators=(",", ":"),
    )
    told: dict[str, JsonValue] = {
        "type": taken.event_type,
        "webhook_id": taken.webhook_id,
        "attempt": taken.attempts,
    }
    try:
        status = send(body, taken.webhook_id)
    except DeliveryError as exc:
        again = (
            None
            if exc.final or taken.attempts >= MAX_DELIVERIES
            else backoff(taken.attempts, cap=600)
        )
        store.outbox.failed(taken, body, str(exc), again, status_code=exc.status_code)
        if exc.status_code is not None:
            told["status"] = exc.status_code
        store.events.append_event(taken.run_id, "notify_failed", {**told, "error": str(exc)})
        log.warning(
            "notification not delivered" + ("; retrying" if again else "; giving up"),
            extra={"action": "notify.failed", "run_id": taken.run_id},
        )
        return False
    store.outbox.delivered(taken, body, status)
    store.events.append_event(taken.run_id, "notified", {**told, "status": status})
    return True
