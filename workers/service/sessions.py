"""The inbox's sign-in, kept on the server: the HttpOnly, SameSite=Strict cookie holds
only a random token (never a credential, never a principal), and the store the
principal the sign-in proved and a CSRF token bound to it, found by a keyed hash of the
token. Signing out deletes the row, so a copy of the cookie ends with it; every sign-in
expires.

Failed sign-ins slow the source that makes them, never a name for others: they are
counted per client address (an IPv6 address by its /64) and per address and name, and
past a few in a window the sign-ins of that address (or of that name from that
address) are refused (429) before their secret is checked. A token of the configured
issuer is checked first, whatever the counts: its signature cannot be guessed, so a
valid one always signs in. Every refusal is logged with the address (never what was
typed)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import JsonValue

from airlock.loop.errors import AirlockError
from airlock.persistence.store import RunStore, Slot
from airlock.workers.service.principals import Method, Principal

log = logging.getLogger("airlock")

COOKIE = "airlock_inbox"
MAX_AGE = timedelta(hours=8)
"""How long a sign-in lasts (less when the token it came from expires sooner)."""

WINDOW = timedelta(minutes=5)
"""Failed sign-ins count for this long from the first of them."""
PER_ADDRESS = 10
"""Failed sign-ins from one client address in a window, whatever the names."""
PER_ADDRESS_NAME = 5
"""Failed sign-ins from one client address naming one name in a window."""

Proved = tuple[Principal, float | None]
"""The principal a credential proves, and when the credential expires (None: never)."""


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str
    expires: datetime
    id: str
    """Its row's id: a decision made under it re-checks it is open, in its transaction."""


class ThrottledError(AirlockError):
    """Too many failed sign-ins from this address (or naming this name from it) (429)."""

    def __init__(self, retry_after: int, what: str) -> None:
        super().__init__(f"too many failed sign-ins {what}")
        self.retry_after = retry_after
        """Seconds until the window that refuses it ends."""
        self.what = what


class SignInFailedError(AirlockError, ValueError):
    """The credential proves no one (401); counted against the address that sent it."""


@dataclass(frozen=True)
class Credentials:
    """What a sign-in presents, as the door checks it. Each check raises
    ``SignInFailedError`` when the credential proves no one; any other error is not the
    client's failure (an issuer that cannot be reached, a name that is not one)."""

    signed: Callable[[], Proved] | None
    """A token of the configured issuer (None: none was presented). Its signature
    cannot be guessed, so it is checked first, whatever the counts."""
    secret: Callable[[], Proved]
    """Anything else (the API token; nothing, on an open API): checked only while the
    address (and the name from it) has failures to spare."""


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

    def sign_in(self, client: str, name: str, credentials: Credentials) -> Proved:
        """The principal a sign-in from the address ``client`` proves. A token of the
        issuer that verifies signs in at once; anything else takes a slot of the address
        and of the name from it first. Raises ``ThrottledError``, ``SignInFailedError``
        (or whatever else a check raises)."""
        refused: SignInFailedError | None = None
        if credentials.signed is not None:
            try:
                proved = credentials.signed()
            except SignInFailedError as exc:  # perhaps the API token: tried below, counted
                refused = exc
            else:
                return self._signed_in(client, proved)
        attempt = self.attempt(client, name)
        try:
            proved = credentials.secret()
        except SignInFailedError as exc:
            _said("inbox.sign_in_failed", "a sign-in failed", client)
            raise refused or exc from None
        except BaseException:
            self.succeeded(attempt)  # not the client's failure: not counted
            raise
        self.succeeded(attempt)
        return self._signed_in(client, proved)

    def attempt(self, client: str, name: str) -> Attempt:
        """Take a slot for a sign-in from ``client`` (its address) naming ``name`` (none
        for a sign-in that names none): the address's, then the name's from it. Raises
        ``ThrottledError``."""
        self._throttle.purge()  # the counts of windows that ended: the table stays small
        source = source_of(client)
        keys = [(_key("address", source), PER_ADDRESS, "from this address")]
        if name:
            named = _key("address+name", f"{source}\x00{name.casefold()}")
            keys.append((named, PER_ADDRESS_NAME, "for this name from this address"))
        taken: list[Slot] = []
        for key, limit, what in keys:
            slot = self._throttle.take(key, limit=limit, window=WINDOW)
            if not slot.granted:
                for earlier in taken:  # refused, it did not fail: not counted
                    self._throttle.refund(earlier)
                retry_after = max(1, math.ceil(slot.retry_after))
                _said("inbox.sign_in_throttled", f"a sign-in refused: {what}", client)
                raise ThrottledError(retry_after, what)
            taken.append(slot)
        return Attempt(tuple(taken))

    def succeeded(self, attempt: Attempt) -> None:
        """Only this attempt's own slots are given back: a success resets no count (of
        another client, or of this one's earlier failures)."""
        for slot in attempt.slots:
            self._throttle.refund(slot)

    def _signed_in(self, client: str, proved: Proved) -> Proved:
        principal = proved[0]
        log.info(
            "signed in to the inbox: %s (%s)",
            principal.id,
            principal.method,
            extra={"action": "inbox.signed_in", "client": client, "principal": principal.id},
        )
        return proved

    def issue(self, principal: Principal, expires: float | None = None) -> tuple[str, Session]:
        """Open a sign-in: the cookie's token and the session it stands for."""
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(24)
        until = None if expires is None else datetime.fromtimestamp(expires, UTC)
        self._sessions.purge()
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


def source_of(client: str) -> str:
    """The source a client address counts as: an IPv4 address as it is, an IPv6 one by
    its /64 (what one host, or one customer of a provider, is given), an IPv4 address
    mapped into IPv6 as that IPv4 address; anything else as it is."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def _said(action: str, what: str, client: str) -> None:
    """A refused sign-in, in the log: the address, never what was typed."""
    log.warning("%s (client %s)", what, client, extra={"action": action, "client": client})


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
