"""The outbox: outbound notifications, recorded by the transition that causes them (in its
statement, see ``Transitions.move``) and delivered, with retries, by workers.

A row is *due* while ``due_at`` is set and has passed. A deliverer *takes* a row with
one guarded UPDATE that moves ``due_at`` on by its lease: of several deliverers, one
wins it, and were that one to die mid-delivery, the row is due again when its lease
ends. Delivered, or given up after the last attempt, a row is *settled*
(``due_at`` null) and kept, as the record of what was sent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update

from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import OUTBOX, new_notification


@dataclass(frozen=True, slots=True)
class Notification:
    """A notification a deliverer took: the ``attempts``-th try to deliver it."""

    id: int
    run_id: str
    event_type: str
    webhook_id: str
    created_at: datetime
    attempts: int
    body: str | None
    """The event as the first attempt built it (opened): every retry sends the same."""


@dataclass(frozen=True, slots=True)
class OutboxCounts:
    due: int
    """Waiting for their (next) delivery attempt."""
    given_up: int
    """Settled without a delivery: every attempt failed."""


class OutboxStore:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._cipher = ctx.cipher
        self._now = ctx.now

    def add(self, run_id: str, event_type: str) -> None:
        """A notification caused outside a transition (one a worker of an earlier version
        was asked to send)."""
        with self._ctx.conns.one() as s:
            s.execute(
                OUTBOX.insert().values(new_notification(uuid.UUID(run_id), event_type, self._now()))
            )

    def due(self, limit: int = 100) -> list[int]:
        """The ids of the rows due now, oldest first."""
        with self._ctx.conns.one() as s:
            ids = s.scalars(
                select(OUTBOX.c.id)
                .where(OUTBOX.c.due_at.is_not(None), OUTBOX.c.due_at <= self._now())
                .order_by(OUTBOX.c.id)
                .limit(limit)
            ).all()
        return [int(i) for i in ids]

    def take(self, notification_id: int, lease: timedelta) -> Notification | None:
        """Take a due row for one delivery attempt; ``None`` if it is not due (another
        deliverer took it, or it was settled meanwhile)."""
        now = self._now()
        with self._ctx.conns.one() as s:
            row = s.execute(
                update(OUTBOX)
                .where(
                    OUTBOX.c.id == notification_id,
                    OUTBOX.c.due_at.is_not(None),
                    OUTBOX.c.due_at <= now,
                )
                .values(due_at=now + lease, attempts=OUTBOX.c.attempts + 1)
                .returning(
                    OUTBOX.c.id,
                    OUTBOX.c.run_id,
                    OUTBOX.c.event_type,
                    OUTBOX.c.webhook_id,
                    OUTBOX.c.created_at,
                    OUTBOX.c.attempts,
                    OUTBOX.c.body,
                )
            ).first()
        if row is None:
            return None
        body = self._cipher.open_text(row.body) if row.body else None
        return Notification(
            id=int(row.id),
            run_id=str(row.run_id),
            event_type=row.event_type,
            webhook_id=row.webhook_id,
            created_at=row.created_at,
            attempts=int(row.attempts),
            body=body,
        )

    def delivered(self, taken: Notification, body: str, status_code: int) -> None:
        """Settled: the receiver accepted it, answering ``status_code`` (a 2xx)."""
        self._settle(taken, body, due_at=None, status_code=status_code, delivered_at=self._now())

    def failed(
        self,
        taken: Notification,
        body: str,
        error: str,
        retry_in: float | None,
        *,
        status_code: int | None = None,
    ) -> None:
        """The attempt failed (the receiver answered ``status_code``, if it answered): due
        again in ``retry_in`` seconds, or (``None``) given up."""
        due_at = None if retry_in is None else self._now() + timedelta(seconds=retry_in)
        self._settle(taken, body, due_at=due_at, last_error=error[:2000], status_code=status_code)

    def _settle(self, taken: Notification, body: str, **values: Any) -> None:
        # only while no later attempt took it (this one's lease ran out meanwhile)
        with self._ctx.conns.one() as s:
            s.execute(
                update(OUTBOX)
                .where(OUTBOX.c.id == taken.id, OUTBOX.c.attempts == taken.attempts)
                .values(body=self._cipher.seal_text(body), **values)
            )

    def counts(self) -> OutboxCounts:
        with self._ctx.conns.one() as s:
            due = s.scalar(select(func.count()).where(OUTBOX.c.due_at.is_not(None)))
            given_up = s.scalar(
                select(func.count()).where(
                    OUTBOX.c.due_at.is_(None), OUTBOX.c.delivered_at.is_(None)
                )
            )
        return OutboxCounts(int(due or 0), int(given_up or 0))
