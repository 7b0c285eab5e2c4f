"""Outbound notifications: a Standard Webhooks event, signed with AIRLOCK_NOTIFY_SECRET,
POSTed to AIRLOCK_NOTIFY_URL when a run starts waiting and when it settles."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from pydantic import JsonValue
from standardwebhooks import Webhook

from workers.service import EventType, Service
from workers.views import run_view


class DeliveryError(Exception):
    """The receiver did not accept the notification; retry later."""


@dataclass(frozen=True)
class Delivery:
    status_code: int
    webhook_id: str


def build_event(service: Service, event_type: EventType, run_id: str) -> dict[str, JsonValue]:
    run = service.repo.require(run_id)
    return {
        "type": event_type,
        "timestamp": datetime.now(UTC).isoformat(),
        "data": run_view(service, run),
    }


def deliver(
    url: str,
    secret: str | None,
    event: dict[str, JsonValue],
    *,
    webhook_id: str | None = None,
    timeout: float = 10.0,
) -> Delivery:
    """POST one signed event. Raises ``DeliveryError`` on a 5xx, 429 or network error;
    a 4xx other than 429 is final (retrying would not help)."""
    webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
    body = json.dumps(event, separators=(",", ":"))
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
