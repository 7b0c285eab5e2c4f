"""Outbound notifications: a Standard Webhooks event, signed with AIRLOCK_NOTIFY_SECRET,
POSTed to AIRLOCK_NOTIFY_URL when a run starts waiting and when it settles.

The transition that causes one records it in the outbox (see ``persistence.outbox``);
``deliver_due`` sends what is due, woken after the commit and by the beat, so a lost
wake-up or a worker lost mid-delivery delays a notification and never loses it.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from pydantic import JsonValue
from standardwebhooks import Webhook

from persistence.outbox import Notification
from workers.service import Service
from workers.views import run_view

log = logging.getLogger("airlock")

MAX_ATTEMPTS = 12
"""Tries of one notification before it is given up (kept, and counted, in the outbox):
about 40 minutes of retries with the backoff below."""
TAKE_FOR = timedelta(seconds=60)
"""How long a deliverer holds a notification it took: longer than a delivery's timeout,
so no other deliverer sends it meanwhile; if the deliverer dies, it is due again."""


class DeliveryError(Exception):
    """The receiver did not accept the notification; retry later."""


@dataclass(frozen=True)
class Delivery:
    status_code: int
    webhook_id: str


@dataclass(frozen=True)
class DeliveryReport:
    delivered: int = 0
    failed: int = 0


def build_event(service: Service, notification: Notification) -> dict[str, JsonValue]:
    """The event as it is sent: its time is the transition's, its data the run as the
    first delivery attempt finds it."""
    run = service.repo.require(notification.run_id)
    return {
        "type": notification.event_type,
        "timestamp": notification.created_at.isoformat(),
        "data": run_view(service, run),
    }


def retry_in(attempts: int) -> float:
    return float(min(600, 2**attempts) * random.uniform(0.5, 1.5))


Send = Callable[..., "Delivery"]


def deliver_due(
    service: Service, url: str, secret: str | None, *, limit: int = 100, send: Send | None = None
) -> DeliveryReport:
    """Deliver the notifications that are due, oldest first. Each is taken by one
    deliverer at a time; every attempt sends the same body under the same webhook-id,
    and is told in the run's audit stream (``notified`` / ``notify_failed``)."""
    send = send or deliver
    outbox = service.repo.outbox
    delivered = failed = 0
    for notification_id in outbox.due(limit):
        taken = outbox.take(notification_id, TAKE_FOR)
        if taken is None:
            continue  # another deliverer has it
        body = taken.body or json.dumps(build_event(service, taken), separators=(",", ":"))
        record: dict[str, JsonValue] = {
            "type": taken.event_type,
            "webhook_id": taken.webhook_id,
            "attempt": taken.attempts,
        }
        try:
            delivery = send(url, secret, body, webhook_id=taken.webhook_id)
        except DeliveryError as exc:
            again = retry_in(taken.attempts) if taken.attempts < MAX_ATTEMPTS else None
            outbox.failed(taken, body, str(exc), again)
            service.repo.append_event(taken.run_id, "notify_failed", {**record, "error": str(exc)})
            log.warning(
                "notification not delivered" + ("; retrying" if again else "; giving up"),
                extra={"action": "notify.failed", "run_id": taken.run_id},
            )
            failed += 1
            continue
        outbox.delivered(taken, body, delivery.status_code)
        service.repo.append_event(
            taken.run_id, "notified", {**record, "status": delivery.status_code}
        )
        delivered += 1
    return DeliveryReport(delivered, failed)


def deliver(
    url: str,
    secret: str | None,
    event: dict[str, JsonValue] | str,
    *,
    webhook_id: str | None = None,
    timeout: float = 10.0,
) -> Delivery:
    """POST one signed event (a dict, or its JSON as sent before). Raises
    ``DeliveryError`` on a 5xx, 429 or network error; a 4xx other than 429 is final
    (retrying would not help)."""
    webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
    body = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    now = datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
    }
    if secret:
        headers["webhook-signature"] = Webhook(secret).sign(webhook_id, now, body)
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise DeliveryError(f"could not reach {url}: {exc}") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise DeliveryError(f"{url} answered {response.status_code}")
    return Delivery(response.status_code, webhook_id)
