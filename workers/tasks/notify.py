"""Outbound notifications: a Standard Webhooks event, signed with AIRLOCK_NOTIFY_SECRET,
POSTed to AIRLOCK_NOTIFY_URL when a run starts waiting and when it settles.

The transition that causes one records it in the outbox (see
``airlock.persistence.store.outbox``); ``deliver_due`` sends what is due, woken after the
commit and by the beat, so a lost wake-up or a worker lost mid-delivery delays a
notification and never loses it.

Every POST goes through the process's one outbound client (``airlock.providers.http.client``,
connections kept and pooled, shared with the model providers and the JWKS fetches),
from whatever thread or greenlet delivers. An attempt ends by its deadline whatever
the receiver does (the transport's ``DEADLINE``: connecting, sending, headers or a
body that trickle in), where httpx's own timeouts bound each read alone, and a byte
every few seconds would hold a deliverer for ever. Of the answer, at most
``READ_LIMIT`` bytes are read.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from urllib.parse import urlsplit

import httpx
from pydantic import JsonValue
from standardwebhooks import Webhook

from airlock.providers.http import client
from airlock.providers.transport import DEADLINE as WITHIN
from airlock.workers.service import DeliveryError, DeliveryReport, Service
from airlock.workers.service.tracing import outbound_headers
from airlock.workers.service.views import run_view

__all__ = ["Delivery", "DeliveryError", "deliver", "deliver_due"]

DEADLINE = 10.0
"""Seconds an attempt may take in all, by default (``AIRLOCK_NOTIFY_TIMEOUT``)."""
READ_LIMIT = 4096
"""Bytes of an answer read at most: its status is what counts. A short answer is read
to its end, so that its connection is kept for the next delivery; a longer one is
closed unread."""


@dataclass(frozen=True)
class Delivery:
    status_code: int
    webhook_id: str


Post = Callable[..., Delivery]


def deliver_due(
    service: Service,
    url: str,
    secret: str | None,
    *,
    limit: int = 100,
    timeout: float = DEADLINE,
    post: Post | None = None,
) -> DeliveryReport:
    """Deliver what the outbox holds due to ``url``, signed with ``secret``, each attempt
    within ``timeout`` seconds (see ``Service.deliver_notifications``); ``post`` stands
    in for ``deliver`` in tests."""
    post = post or partial(deliver, timeout=timeout)

    def send(body: str, webhook_id: str) -> int:
        return post(url, secret, body, webhook_id=webhook_id).status_code

    return service.deliver_notifications(send, lambda run: run_view(service, run), limit=limit)


def deliver(
    url: str,
    secret: str | None,
    event: dict[str, JsonValue] | str,
    *,
    webhook_id: str | None = None,
    timeout: float = DEADLINE,
) -> Delivery:
    """POST one signed event (a dict, or its JSON as sent before) with the process's
    outbound client, within ``timeout`` seconds in all. Only a 2xx delivers it; anything
    else raises ``DeliveryError`` (see ``refusal``)."""
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
    headers |= outbound_headers()  # the run's traceparent, when traces are on
    status = _post(url, body, headers, timeout)
    if (refused := refusal(url, status)) is not None:
        raise refused
    return Delivery(status, webhook_id)


def receiver(url: str) -> str:
    """The notify URL as an error names it (stored in the outbox and in the run's
    ``notify_failed`` event, which every reader of the run sees): its scheme, host and
    port only, since a receiver's URL often holds its credential (a user's password, a
    token in the query, a secret path)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "the notify URL"
    return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else "the notify URL"


def refusal(url: str, status: int) -> DeliveryError | None:
    """What an answer other than a 2xx means: a redirect (not followed: the receiver
    named the URL, and the signed body is for it alone), a 429 or a 5xx are retried;
    any other 4xx is final (another attempt would be answered the same)."""
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return DeliveryError(
            f"{receiver(url)} answered {status}, a redirect (not followed)", status_code=status
        )
    if status == 429 or status >= 500:
        return DeliveryError(f"{receiver(url)} answered {status}", status_code=status)
    return DeliveryError(
        f"{receiver(url)} answered {status}; not retried", status_code=status, final=True
    )


def _post(url: str, body: str, headers: dict[str, str], deadline: float) -> int:
    """The receiver's status code; ``DeliveryError`` if it could not be reached or no
    answer came within ``deadline`` seconds."""
    try:
        with client().stream(
            "POST",
            url,
            content=body,
            headers=headers,
            timeout=deadline,
            follow_redirects=False,
            extensions={WITHIN: deadline},
        ) as response:
            _read_at_most(response, READ_LIMIT)
            return response.status_code
    except httpx.TimeoutException as exc:
        raise DeliveryError(f"{receiver(url)} did not answer within {deadline:g} s") from exc
    except httpx.HTTPError as exc:
        raise DeliveryError(f"could not reach {receiver(url)}: {exc!r}") from exc


def _read_at_most(response: httpx.Response, limit: int) -> None:
    read = 0
    for chunk in response.iter_raw():
        read += len(chunk)
        if read >= limit:
            return  # closing the response closes the connection, unread
