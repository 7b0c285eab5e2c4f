"""Outbound notifications: a Standard Webhooks event, signed with AIRLOCK_NOTIFY_SECRET,
POSTed to AIRLOCK_NOTIFY_URL when a run starts waiting and when it settles.

The transition that causes one records it in the outbox (see
``persistence.store.outbox``); ``deliver_due`` sends what is due, woken after the
commit and by the beat, so a lost wake-up or a worker lost mid-delivery delays a
notification and never loses it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from pydantic import JsonValue
from standardwebhooks import Webhook

from workers.service import DeliveryError, DeliveryReport, Service
from workers.views import run_view

__all__ = ["Delivery", "DeliveryError", "deliver", "deliver_due"]


@dataclass(frozen=True)
class Delivery:
    status_code: int
    webhook_id: str


Post = Callable[..., Delivery]


def deliver_due(
    service: Service, url: str, secret: str | None, *, limit: int = 100, post: Post | None = None
) -> DeliveryReport:
    """Deliver what the outbox holds due to ``url``, signed with ``secret`` (see
    ``Service.deliver_notifications``); ``post`` stands in for ``deliver`` in tests."""
    post = post or deliver

    def send(body: str, webhook_id: str) -> int:
        return post(url, secret, body, webhook_id=webhook_id).status_code

    return service.deliver_notifications(send, lambda run: run_view(service, run), limit=limit)


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
