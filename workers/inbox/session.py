"""The inbox's sign-in: a verified principal kept in a signed, HttpOnly, SameSite=Strict
cookie (never the token itself), and a CSRF token bound to it for every form."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer

from workers.principals import Principal
from workers.settings import Settings

log = logging.getLogger("airlock")

COOKIE = "airlock_inbox"
MAX_AGE = 8 * 3600
"""Seconds a sign-in lasts (less when the token it came from expires sooner)."""


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str
    expires: float


def session_key(config: Settings) -> bytes:
    """``AIRLOCK_SESSION_SECRET``; else derived from the API token or the webhook
    secret; else a random key of this process (sign-ins then end with it)."""
    for name, value in (
        ("session", config.session_secret),
        ("api-token", config.api_token),
        ("webhook", config.webhook_secret),
    ):
        if value:
            return hmac.new(
                value.encode(), f"airlock-inbox:{name}".encode(), hashlib.sha256
            ).digest()
    log.warning(
        "no AIRLOCK_SESSION_SECRET, API token or webhook secret: inbox sign-ins last as long "
        "as this process",
        extra={"action": "inbox.ephemeral_sessions"},
    )
    return secrets.token_bytes(32)


class Sessions:
    def __init__(self, key: bytes) -> None:
        self._signer = URLSafeTimedSerializer(key, salt="airlock-inbox-session")

    def issue(self, principal: Principal, expires: float | None = None) -> tuple[str, Session]:
        until = min(time.time() + MAX_AGE, expires or float("inf"))
        session = Session(principal, secrets.token_urlsafe(24), until)
        data: dict[str, Any] = {
            "id": principal.id,
            "method": principal.method,
            "roles": sorted(principal.roles),
            "every_role": principal.every_role,
            "issuer": principal.issuer,
            "csrf": session.csrf,
            "expires": until,
        }
        return self._signer.dumps(data), session

    def read(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        try:
            data = self._signer.loads(cookie, max_age=MAX_AGE)
            if float(data["expires"]) < time.time():
                return None
            principal = Principal(
                id=data["id"],
                method=data["method"],
                roles=frozenset(data["roles"]),
                every_role=bool(data["every_role"]),
                issuer=data["issuer"],
            )
            return Session(principal, str(data["csrf"]), float(data["expires"]))
        except (BadSignature, KeyError, TypeError, ValueError):
            return None


def csrf_ok(session: Session, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(session.csrf.encode(), sent.encode())
