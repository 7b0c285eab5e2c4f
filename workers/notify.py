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
    """POST one signed event (a dict, or its JSON as sent before). Only a 2xx delivers
    it; anything else raises ``DeliveryError`` (see ``refusal``)."""
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
    if (refused := refusal(url, response.status_code)) is not None:
        raise refused
    return Delivery(response.status_code, webhook_id)


def refusal(url: str, status: int) -> DeliveryError | None:
    """What an answer other than a 2xx means: a redirect (not followed: the receiver
    named the URL, and the signed body is for it alone), a 429 or a 5xx are retried;
    any other 4xx is final (another attempt would be answered the same)."""
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return DeliveryError(f"{url} answered {status}, a redirect (not followed)", status_code=status)
    if status == 429 or status >= 500:
        return DeliveryError(f"{url} answered {status}", status_code=status)
    return DeliveryError(f"{url} answered {status}; not retried", status_code=status, final=True)
