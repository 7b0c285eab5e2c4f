"""The inbox's sign-in, kept on the server: the HttpOnly, SameSite=Strict cookie holds
only a random token (never a credential, never a principal), and the store the
principal the sign-in proved and a CSRF token bound to it, found by a keyed hash of the
token. Signing out deletes the row, so a copy of the cookie ends with it; every sign-in
expires. Failed sign-ins are counted per client and per name: past a few in a window,
sign-ins are refused (429) before their credential is checked."""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import JsonValue

from airlock.loop.errors import AirlockError
from airlock.persistence.store import RunStore, Slot
from airlock.workers.service.principals import Method, Principal

COOKIE = "airlock_inbox"
MAX_AGE = timedelta(hours=8)
"""How long a sign-in lasts (less when the token it came from expires sooner)."""

WINDOW = timedelta(minutes=5)
"""Failed sign-ins count for this long from the first of them."""
PER_CLIENT = 5
"""Failed sign-ins from one client (its address) in a window."""
PER_NAME = 10
"""Failed sign-ins naming one name in a window, from any number of clients."""


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str
    expires: datetime
    id: str
    """Its row's id: a decision made under it re-checks it is open, in its transaction."""


class ThrottledError(AirlockError):
    """Too many failed sign-ins from this client or for this name (429)."""

    def __init__(self, retry_after: int, what: str) -> None:
        super().__init__(f"too many failed sign-ins {what}")
        self.retry_after = retry_after
        """Seconds until the window that refuses it ends."""
        self.what = what


@dataclass(frozen=True)
class Attempt:
    """The slots a sign-in attempt holds until it succeeds (given back) or fails (kept)."""

    slots: tuple[Slot, ...]


class Sessions:
    def __init__(self, store: RunStore, secret: str | None) -> None:
        self._sessions = store.sessions
        self._throttle = store.throttle
        # ``AIRLOCK_SESSION_SECRET`` keys the hash a sign-in is stored under, so that
        # changing it ends every sign-in at once; unset, the tokens' own randomness is
        # what protects them (nothing is derived from another credential)
        self._key = (secret or "airlock-inbox-session").encode()

    # -- sign-in -----------------------------------------------------------------------

    def attempt(self, client: str, name: str) -> Attempt:
        """Take a slot for a sign-in from ``client`` naming ``name`` (none for a sign-in
        that names none). Raises ``ThrottledError``."""
        keys = [(_key("client", client), PER_CLIENT, "from this address")]
        if name:
            keys.append((_key("name", name.casefold()), PER_NAME, "for this name"))
        taken: list[Slot] = []
        for key, limit, what in keys:
            slot = self._throttle.take(key, limit=limit, window=WINDOW)
            if not slot.granted:
                for earlier in taken:  # refused, it did not fail: not counted
                    self._throttle.refund(earlier)
                raise ThrottledError(max(1, math.ceil(slot.retry_after)), what)
            taken.append(slot)
        return Attempt(tuple(taken))

    def succeeded(self, attempt: Attempt) -> None:
        """Only this attempt's own slots are given back: a success resets no count (of
        another client, or of this one's earlier failures)."""
        for slot in attempt.slots:
            self._throttle.refund(slot)

    def issue(self, principal: Principal, expires: float | None = None) -> tuple[str, Session]:
        """Open a sign-in: the cookie's token and the session it stands for."""
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        until = None if expires is None else datetime.fromtimestamp(expires, UTC)
        self._sessions.purge()
        self._throttle.purge()
        session_id = self._id(token)
        opened = self._sessions.open(
            session_id, _stored(principal), csrf, lasts=MAX_AGE, until=until
        )
        return token, Session(principal, csrf, opened, session_id)

    # -- a signed-in request ---------------------------------------------------------------

    def read(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        session_id = self._id(cookie)
        found = self._sessions.find(session_id)
        if found is None:
            return None
        try:
            principal = _principal(found.principal)
        except (KeyError, TypeError, ValueError):
            return None
        return Session(principal, found.csrf, found.expires_at, session_id)

    def close(self, cookie: str | None) -> None:
        """Sign out: the sign-in ends on the server, whoever holds a copy of its cookie."""
        if cookie:
            self._sessions.close(self._id(cookie))

    def _id(self, token: str) -> str:
        return hmac.new(self._key, token.encode(errors="replace"), hashlib.sha256).hexdigest()


def csrf_ok(session: Session, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(session.csrf.encode(), sent.encode())


def _key(kind: str, value: str) -> str:
    """A count's key: a hash, so that nothing typed into a failed sign-in is stored."""
    return hashlib.sha256(f"{kind}:{value}".encode(errors="replace")).hexdigest()


def _stored(principal: Principal) -> dict[str, JsonValue]:
    return {
        "id": principal.id,
        "method": principal.method,
        "roles": list[JsonValue](sorted(principal.roles)),
        "every_role": principal.every_role,
        "issuer": principal.issuer,
    }


def _principal(data: dict[str, JsonValue]) -> Principal:
    """The principal a sign-in stored (made only by the inbox's sign-in: the API token's
    holder, ``inbox``, or a token's subject, ``oidc``). Raises ``ValueError``."""
    roles, issuer = data["roles"], data["issuer"]
    method: Method
    match data["method"]:
        case "inbox":
            method = "inbox"
        case "oidc":
            method = "oidc"
        case other:
            raise ValueError(f"not a sign-in's method: {other!r}")
    return Principal(
        id=str(data["id"]),
        method=method,
        roles=frozenset(str(r) for r in roles) if isinstance(roles, list) else frozenset(),
        every_role=data["every_role"] is True,
        issuer=issuer if isinstance(issuer, str) else None,
    )
