"""Outbound notifications: a Standard Webhooks event, signed with AIRLOCK_NOTIFY_SECRET,
POSTed to AIRLOCK_NOTIFY_URL when a run starts waiting and when it settles.

The transition that causes one records it in the outbox (see
``airlock.persistence.store.outbox``); ``deliver_due`` sends what is due, woken after the
commit and by the beat, so a lost wake-up or a worker lost mid-delivery delays a
notification and never loses it.

Each process keeps one ``Notifier``: an ``httpx.AsyncClient`` (connections kept and
pooled) on an event loop in a thread of its own, used by every thread that delivers.
An attempt ends by its deadline whatever the receiver does: asyncio's timeout cancels
the request wherever it waits (connecting, sending, headers or a body that trickle in),
where httpx's own timeouts bound each read alone, and a byte every few seconds would
hold a deliverer for ever. Of the answer, at most ``READ_LIMIT`` bytes are read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache, partial
from urllib.parse import urlsplit

import httpx
from pydantic import JsonValue
from standardwebhooks import Webhook

from airlock.workers.service import DeliveryError, DeliveryReport, Service
from airlock.workers.service.views import run_view

__all__ = ["Delivery", "DeliveryError", "Notifier", "deliver", "deliver_due"]

DEADLINE = 10.0
"""Seconds an attempt may take in all, by default (``AIRLOCK_NOTIFY_TIMEOUT``)."""
READ_LIMIT = 4096
"""Bytes of an answer read at most: its status is what counts. A short answer is read
to its end, so that its connection is kept for the next delivery; a longer one is
closed unread."""
MAX_CONNECTIONS = 64
"""Connections a process holds at most; deliveries beyond wait for one."""


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
    ``Notifier``, within ``timeout`` seconds in all. Only a 2xx delivers it; anything
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
    status = notifier().post(url, body, headers, timeout)
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


class Notifier:
    """POSTs on one kept ``httpx.AsyncClient``, from any thread (see the module's
    docstring)."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None  # used on the loop alone

    def post(self, url: str, body: str, headers: dict[str, str], deadline: float) -> int:
        """The receiver's status code; ``DeliveryError`` if none came within
        ``deadline`` seconds or it could not be reached."""
        future = asyncio.run_coroutine_threadsafe(
            self._post(url, body, headers, deadline), self._running()
        )
        try:
            # the request ends by its deadline; this bounds a name lookup too, which
            # runs in a thread that a cancellation does not stop
            return future.result(deadline + 5.0)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise DeliveryError(f"{receiver(url)} did not answer within {deadline:g} s") from exc

    async def _post(self, url: str, body: str, headers: dict[str, str], deadline: float) -> int:
        if self._client is None:
            # no timeout of its own: the deadline bounds the whole attempt
            self._client = httpx.AsyncClient(limits=self._limits, timeout=None)
        try:
            async with asyncio.timeout(deadline):
                request = self._client.build_request("POST", url, content=body, headers=headers)
                response = await self._client.send(request, stream=True)
                try:
                    await _read_at_most(response, READ_LIMIT)
                finally:
                    await response.aclose()
        except TimeoutError as exc:
            raise DeliveryError(f"{receiver(url)} did not answer within {deadline:g} s") from exc
        except httpx.HTTPError as exc:
            raise DeliveryError(f"could not reach {receiver(url)}: {exc!r}") from exc
        return response.status_code

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=airlock.loop.run_forever, name="airlock-notify", daemon=True
                ).start()
                self._loop = loop
            return self._loop


async def _read_at_most(response: httpx.Response, limit: int) -> None:
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read >= limit:
            return  # the caller closes the response, and with it the connection


@lru_cache(maxsize=1)
def notifier() -> Notifier:
    """The process's ``Notifier``."""
    return Notifier()


# a forked child makes its own: the loop's thread is not copied
os.register_at_fork(after_in_child=notifier.cache_clear)
