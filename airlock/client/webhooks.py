"""Standard Webhooks, both ways: an approval client signs its decisions; a receiver
verifies Airlock's notifications. The ``standardwebhooks`` library the API verifies and
signs with does both here too."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from standardwebhooks import Webhook, WebhookVerificationError

from airlock.client.errors import InvalidSignatureError
from airlock.client.models import Notification


@dataclass(frozen=True)
class ApprovalClient:
    """A named approval client (``AIRLOCK_APPROVAL_CLIENTS``; ``default`` is the one of
    ``AIRLOCK_WEBHOOK_SECRET``) with its secret (``whsec_…``). It vouches for the
    approver a decision names (``approver``, per client or per decision)."""

    name: str
    secret: str = field(repr=False)
    approver: str | None = None

    def sign(self, body: bytes, *, webhook_id: str | None = None) -> dict[str, str]:
        """The Standard Webhooks headers of ``body``: a fresh ``webhook-id`` (a retry of
        the same signed request is a replay the API answers from what it stored)."""
        webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
        now = datetime.now(UTC)
        return {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": Webhook(self.secret).sign(webhook_id, now, body.decode()),
        }


def verify_notification(secret: str, headers: Mapping[str, str], body: bytes) -> Notification:
    """The notification ``body`` as Airlock sent it, once its Standard Webhooks signature
    (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``) verifies with
    ``secret`` (``AIRLOCK_NOTIFY_SECRET``) within the timestamp's tolerance. Raises
    ``InvalidSignatureError``; a signed body that is not a notification raises
    ``pydantic.ValidationError``."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        Webhook(secret).verify(body, lowered)
    except (WebhookVerificationError, ValueError) as exc:
        raise InvalidSignatureError(f"the notification does not verify: {exc}") from exc
    return Notification.model_validate_json(body)


InvalidSignature = InvalidSignatureError
"""The name DESIGN §9 gives it."""
