"""Delivering the outbox: due notifications claimed in batches (each by one deliverer at
a time, each its run's first unsettled one), sent with the same body under the same
webhook-id on every attempt, retried with backoff and jitter, given up (and kept) after
the last."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from pydantic import JsonValue

from airlock.loop.errors import AirlockError
from airlock.persistence.store import RunStore
from airlock.persistence.store.outbox import Notification
from airlock.workers.service.backoff import backoff
from airlock.workers.service.tracing import on_behalf

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
"""How long a deliverer holds a notification it took, unless told (a worker's dispatcher:
its attempts' deadline and a margin): longer than a delivery's timeout, so no other
deliverer sends it meanwhile; if the deliverer dies, it is due again."""


@dataclass(frozen=True)
class Retries:
    """When a notification that was not delivered is tried again: ``backoff`` from 1 s,
    doubled per attempt up to ``max_delay`` seconds, jittered; given up after
    ``attempts`` (``AIRLOCK_NOTIFY_RETRY_MAX_DELAY``, ``AIRLOCK_NOTIFY_MAX_ATTEMPTS``)."""

    max_delay: float = 600.0
    attempts: int = MAX_DELIVERIES

    def after(self, attempt: int) -> float:
        return backoff(attempt - 1, cap=self.max_delay)


DEFAULT_RETRIES = Retries()


@dataclass(frozen=True)
class DeliveryReport:
    delivered: int = 0
    failed: int = 0


Render = Callable[[str], JsonValue]
"""A run's view, by its id, as the notification's ``data``."""
Traced = Callable[[str], Mapping[str, str]]
"""The headers a run's outbound calls carry (its ``traceparent``), by its id."""


def _untraced(run_id: str) -> Mapping[str, str]:
    del run_id
    return {}


def deliver_due(
    store: RunStore,
    send: Send,
    render: Render,
    limit: int = 100,
    retries: Retries = DEFAULT_RETRIES,
    *,
    traced: Traced = _untraced,
) -> DeliveryReport:
    """Claim the notifications that are due and deliver them one after another (the
    dispatcher, ``airlock.workers.tasks.dispatcher``, sends a claim's concurrently)."""
    delivered = failed = 0
    # a run's next notification is claimable once its previous one is delivered
    while delivered + failed < limit and (
        batch := store.outbox.claim(limit - delivered - failed, TAKE_FOR)
    ):
        for taken in batch:
            if deliver(store, taken, send, render, retries, traced=traced):
                delivered += 1
            else:
                failed += 1
    return DeliveryReport(delivered, failed)


def deliver(
    store: RunStore,
    taken: Notification,
    send: Send,
    render: Render,
    retries: Retries = DEFAULT_RETRIES,
    *,
    traced: Traced = _untraced,
) -> bool:
    """One attempt at a claimed notification: every attempt sends the same body under
    the same webhook-id and settles the row; a failed one is told in the run's audit
    stream too (``notify_failed``). Whether it was delivered."""
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
        with on_behalf(traced(taken.run_id)):  # its traceparent, when traces are on
            status = send(body, taken.webhook_id)
    except DeliveryError as exc:
        last = exc.final or taken.attempts >= retries.attempts
        again = None if last else retries.after(taken.attempts)
        store.outbox.failed(taken, body, str(exc), again, status_code=exc.status_code)
        if exc.status_code is not None:
            told["status"] = exc.status_code
        store.events.append_event(taken.run_id, "notify_failed", {**told, "error": str(exc)})
        log.warning(
            "notification not delivered" + ("; retrying" if again else "; giving up"),
            extra={"action": "notify.failed", "run_id": taken.run_id},
        )
        return False
    # the outbox row is the record of a delivery (its status, when): an event as well
    # would be a second write per delivery, and on the run's own row (its events' seq)
    store.outbox.delivered(taken, body, status)
    return True
