"""Inbox sign-ins, kept on the server: a row per sign-in, found by the keyed hash of the
random token its cookie holds. A sign-in lasts until it expires or is closed (signed
out); a cookie whose row is gone is no sign-in, whoever kept a copy of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import JsonValue
from sqlalchemy import delete, insert, select

from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import SESSIONS


@dataclass(frozen=True, slots=True)
class StoredSession:
    principal: dict[str, JsonValue]
    """What the sign-in proved, as the inbox wrote it."""
    csrf: str
    expires_at: datetime


class SessionStore:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def open(
        self,
        session_id: str,
        principal: dict[str, JsonValue],
        csrf: str,
        *,
        lasts: timedelta,
        until: datetime | None = None,
    ) -> datetime:
        """Open a sign-in that lasts ``lasts`` from now, and not past ``until`` (when the
        credential it came from expires); when it expires."""
        now = self._ctx.now()
        expires_at = now + lasts if until is None else min(now + lasts, until)
        with self._ctx.conns.one() as s:
            s.execute(
                insert(SESSIONS).values(
                    id=session_id,
                    principal=principal,
                    csrf=csrf,
                    created_at=now,
                    expires_at=expires_at,
                )
            )
        return expires_at

    def find(self, session_id: str) -> StoredSession | None:
        """The sign-in, while it is open and has not expired."""
        with self._ctx.conns.one() as s:
            row = s.execute(
                select(SESSIONS.c.principal, SESSIONS.c.csrf, SESSIONS.c.expires_at).where(
                    SESSIONS.c.id == session_id, SESSIONS.c.expires_at > self._ctx.now()
                )
            ).first()
        if row is None:
            return None
        return StoredSession(dict(row.principal), row.csrf, row.expires_at)

    def close(self, session_id: str) -> bool:
        """Sign out: whether it was open."""
        with self._ctx.conns.one() as s:
            return bool(s.execute(delete(SESSIONS).where(SESSIONS.c.id == session_id)).rowcount)

    def purge(self) -> int:
        """Delete the expired sign-ins; how many."""
        with self._ctx.conns.one() as s:
            done = s.execute(delete(SESSIONS).where(SESSIONS.c.expires_at <= self._ctx.now()))
            return int(done.rowcount)
