"""The typed client of the Airlock HTTP API (DESIGN §9): ``Client`` and ``AsyncClient``
on httpx, ``ApprovalClient`` to sign decisions, ``verify_notification`` to check
Airlock's notifications, the typed run view and events, and the errors every refusal
raises. See docs/client.md.

    from airlock.client import Client

    with Client("http://127.0.0.1:8000", token="...") as airlock:
        run = airlock.create_run("mailer", "Mail customer 42", idempotency_key="order-42")
        run = airlock.wait(run.id, timeout=60)
"""

from __future__ import annotations

from airlock.client.aio import AsyncClient
from airlock.client.errors import (
    AirlockError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidSignatureError,
    NotFoundError,
    PayloadTooLargeError,
    ServerError,
    ServiceUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
    UnprocessableError,
    WaitTimeoutError,
)
from airlock.client.models import (
    Approval,
    Decision,
    Event,
    Notification,
    Pending,
    PendingCall,
    PolicyJudgement,
    Run,
    RunStatus,
    Usage,
)
from airlock.client.sync import Client
from airlock.client.webhooks import ApprovalClient, InvalidSignature, verify_notification

__all__ = [
    "AirlockError",
    "Approval",
    "ApprovalClient",
    "AsyncClient",
    "BadRequestError",
    "Client",
    "ConflictError",
    "Decision",
    "Event",
    "ForbiddenError",
    "GoneError",
    "InvalidSignature",
    "InvalidSignatureError",
    "NotFoundError",
    "Notification",
    "PayloadTooLargeError",
    "Pending",
    "PendingCall",
    "PolicyJudgement",
    "Run",
    "RunStatus",
    "ServerError",
    "ServiceUnavailableError",
    "TooManyRequestsError",
    "UnauthorizedError",
    "UnprocessableError",
    "Usage",
    "WaitTimeoutError",
    "verify_notification",
]
