"""What the API checks before it reads a request's body: who the caller is (see
``workers.auth``), the webhook's headers and timestamp, and the body's size as it
streams in (chunked or not)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api_metrics import Metrics
from workers.problems import ProblemError, problem_response

MAX_BODY = 1024 * 1024
MAX_APPROVAL_BODY = 64 * 1024


def token_matches(authorization: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time, as bytes: a header
    may hold any character, and ``compare_digest`` refuses non-ASCII text."""
    if authorization is None:
        return False
    expected = f"Bearer {token}".encode()
    return hmac.compare_digest(authorization.encode("utf-8", "surrogateescape"), expected)


Gate = Callable[[Scope, Headers], Awaitable[None]]
"""Refuses (``ProblemError``) a request by its path and headers, before its body is
read; it may note who the caller is in the scope's ``state``."""


class BodyGate:
    """Authenticates what it can from the headers (every request's), then reads the
    body with its limit counted as it streams in (chunked or not, whatever
    Content-Length says): a request over the limit gets 413 after at most the limit was
    read, an unauthenticated one 401 before any of it."""

    def __init__(self, app: ASGIApp, *, gate: Gate, metrics: Metrics) -> None:
        self._app = app
        self._gate = gate
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path: str = scope["path"]
        approval = path.endswith("/approval")
        limit = MAX_APPROVAL_BODY if approval else MAX_BODY
        headers = Headers(scope=scope)
        try:
            await self._gate(scope, headers)
            reads = scope["method"] not in ("GET", "HEAD", "OPTIONS")
            body = (
                await _read_within(receive, headers.get("content-length"), limit) if reads else b""
            )
        except ProblemError as exc:
            if exc.status == 413 and approval:
                self._metrics.rejections.labels("too_large").inc()
            await problem_response(exc.status, exc.title, exc.detail)(scope, receive, send)
            return
        if body is None:
            return  # the client went away
        if not reads:
            await self._app(scope, receive, send)
            return
        await self._app(scope, replay(body, receive), send)


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an app after the body was read: the body whole, then whatever
    ``receive`` says next (a disconnect)."""
    delivered = False

    async def again() -> Message:
        nonlocal delivered
        if delivered:
            return await receive()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


async def _read_within(receive: Receive, length: str | None, limit: int) -> bytes | None:
    too_large = ProblemError(413, "Body too large", f"the limit is {limit} bytes")
    if length is not None and (not length.isdigit() or len(length) > 12 or int(length) > limit):
        raise too_large
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def signed_headers(headers: Mapping[str, str], metrics: Metrics) -> str:
    """The webhook's id, once its headers are there and its timestamp is within the
    tolerance: checked before its body is read."""
    webhook_id = headers.get("webhook-id")
    if not (webhook_id and headers.get("webhook-timestamp") and headers.get("webhook-signature")):
        metrics.rejections.labels("missing_headers").inc()
        raise ProblemError(
            401, "Unsigned", "webhook-id, webhook-timestamp and webhook-signature are required"
        )
    timestamp = headers["webhook-timestamp"]
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12) or (
        abs(time.time() - int(timestamp)) > 300
    ):
        metrics.rejections.labels("timestamp").inc()
        raise ProblemError(401, "Bad timestamp", "webhook-timestamp is not within 5 minutes of now")
    return webhook_id
