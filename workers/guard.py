"""What the API checks before it reads a request's body: the bearer token, the
webhook's headers and timestamp, and the body's size as it streams in (chunked or
not); then the webhook's signature."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api_metrics import Metrics
from workers.problems import ProblemError, problem_response
from workers.settings import Settings

MAX_BODY = 1024 * 1024
MAX_APPROVAL_BODY = 64 * 1024


def token_matches(authorization: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time, as bytes: a header
    may hold any character, and ``compare_digest`` refuses non-ASCII text."""
    if authorization is None:
        return False
    expected = f"Bearer {token}".encode()
    return hmac.compare_digest(authorization.encode("utf-8", "surrogateescape"), expected)


Gate = Callable[[str, Headers], None]
"""Refuses (``ProblemError``) a request by its path and headers, before its body is read."""


def gate_of(config: Settings, secrets: list[str], metrics: Metrics) -> Gate:
    def gate(path: str, headers: Headers) -> None:
        if path.endswith("/approval"):
            if secrets:
                _signed_headers(headers, metrics)
        elif (
            path.startswith("/v1/")
            and config.api_token
            and not token_matches(headers.get("authorization"), config.api_token)
        ):
            raise ProblemError(
                401, "Unauthorized", "send Authorization: Bearer <AIRLOCK_API_TOKEN>"
            )

    return gate


class BodyGate:
    """Authenticates what it can from the headers, then reads the body with its limit
    counted as it streams in (chunked or not, whatever Content-Length says): a request
    over the limit gets 413 after at most the limit was read, an unauthenticated one
    401 before any of it."""

    def __init__(self, app: ASGIApp, *, gate: Gate, metrics: Metrics) -> None:
        self._app = app
        self._gate = gate
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self._app(scope, receive, send)
            return
        path: str = scope["path"]
        approval = path.endswith("/approval")
        limit = MAX_APPROVAL_BODY if approval else MAX_BODY
        headers = Headers(scope=scope)
        try:
            self._gate(path, headers)
            body = await _read_within(receive, headers.get("content-length"), limit)
        except ProblemError as exc:
            if exc.status == 413 and approval:
                self._metrics.rejections.labels("too_large").inc()
            await problem_response(exc.status, exc.title, exc.detail)(scope, receive, send)
            return
        if body is None:
            return  # the client went away
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self._app(scope, replay, send)


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


def _signed_headers(headers: Mapping[str, str], metrics: Metrics) -> str:
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


def verify(verifiers: list[Webhook], raw: bytes, headers: dict[str, str], metrics: Metrics) -> str:
    if not verifiers:
        metrics.rejections.labels("not_configured").inc()
        raise ProblemError(503, "Approvals disabled", "AIRLOCK_WEBHOOK_SECRET is not set")
    webhook_id = _signed_headers(headers, metrics)
    for verifier in verifiers:  # several secrets while one is rotated out
        try:
            verifier.verify(raw, headers, json_parse=False)
            return webhook_id
        except (WebhookVerificationError, ValueError, UnicodeDecodeError):
            continue
    metrics.rejections.labels("signature").inc()
    raise ProblemError(401, "Bad signature", "no webhook-signature matches the configured secret")
