"""What the API checks before it reads a request's body: who the caller is (see
``airlock.workers.http.auth``), the webhook's headers and timestamp, and the body's size as it
streams in (chunked or not); and how a refused request's body is read and thrown away
so that its client reads the refusal."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable, Mapping
from enum import Enum

from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock.workers.http.metrics import Metrics
from airlock.workers.http.problems import ProblemError, problem_response

MAX_BODY = 1024 * 1024
MAX_APPROVAL_BODY = 64 * 1024
DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_SECONDS = 10.0
"""How much of a refused request's body is read and thrown away, at most, before the
answer: more, or longer, and the connection is closed instead."""


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
        reads = scope["method"] not in ("GET", "HEAD", "OPTIONS")
        read = Read.NOTHING
        try:
            await self._gate(scope, headers)
            body: bytes | None = b""
            if reads:
                _within(headers.get("content-length"), limit)
                read = Read.SOME
                body = await _read_within(receive, limit)
        except ProblemError as exc:
            if exc.status == 413 and approval:
                self._metrics.rejections.labels("too_large").inc()
            if isinstance(exc, BodyTooLargeError) and exc.ended:
                read = Read.ALL
            response = await refuse(exc, headers, receive, read)
            await response(scope, receive, send)
            return
        if body is None:
            return  # the client went away
        if not reads:
            await self._app(scope, receive, send)
            return
        await self._app(scope, replay(body, receive), send)


class Read(Enum):
    """How much of a refused request's body was read."""

    NOTHING = "nothing"
    SOME = "some"
    ALL = "all"


class BodyTooLargeError(ProblemError):
    """413: a body over the limit; ``ended``: its last part was read."""

    def __init__(self, limit: int, *, ended: bool = False) -> None:
        super().__init__(413, "Body too large", f"the limit is {limit} bytes")
        self.ended = ended


async def refuse(
    exc: ProblemError,
    headers: Headers,
    receive: Receive,
    read: Read,
    *,
    limit: int = DRAIN_BYTES,
    seconds: float = DRAIN_SECONDS,
) -> Response:
    """The answer to a request refused before its body was read whole. The rest of the
    body is read first and thrown away (``drain``): a server that closes a connection
    while some of its request is still unread makes the kernel reset it, and a client
    still sending (or that sent ``Connection: close``, as urllib does) loses the answer
    before it reads it. Past the drain's bound, or when the client waits for ``100
    Continue`` before it sends a body it must not send now, the answer closes the
    connection."""
    waits = read is Read.NOTHING and headers.get("expect", "").lower() == "100-continue"
    ended = read is Read.ALL or (not waits and await drain(receive, limit=limit, seconds=seconds))
    response = problem_response(exc.status, exc.title, exc.detail, type=exc.type)
    if not ended:
        response.headers["connection"] = "close"
    return response


async def drain(
    receive: Receive, *, limit: int = DRAIN_BYTES, seconds: float = DRAIN_SECONDS
) -> bool:
    """Reads the rest of a request's body and throws it away: True once it ended (or the
    client went away), False when more than ``limit`` bytes came, or it did not end
    within ``seconds``."""
    size = 0
    try:
        async with asyncio.timeout(seconds):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return True
                size += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return True
                if size > limit:
                    return False
    except TimeoutError:
        return False


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


def _within(length: str | None, limit: int) -> None:
    """Refuses a body whose Content-Length is over ``limit`` (or not a length)."""
    if length is not None and (not length.isdigit() or len(length) > 12 or int(length) > limit):
        raise BodyTooLargeError(limit)


async def _read_within(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(limit)
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
