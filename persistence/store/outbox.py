"""The outbox: outbound notifications, recorded by the transition that causes them (in its
statement, see ``Transitions.move``) and delivered, with retries, by workers.

A row is *due* while ``due_at`` is set and has passed. A dispatcher *claims* due rows
in batches with one UPDATE that moves their ``due_at`` on by a lease (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL: concurrent claimers take disjoint rows; on SQLite the statement
holds the database's one write lock, so there is one claimer at a time); were it to die
mid-delivery, a row is due again when its lease ends. Only a run's first unsettled row
is claimable: its later events wait until it is settled, so a receiver never gets a
run's ``completed`` before its ``waiting_for_approval``. Delivered, or given up after
the last attempt, a row is *settled* (``due_at`` null) and kept, as the record of what
was sent.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import exists, func, select, update

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


TAKEN = (
    OUTBOX.c.id,
    OUTBOX.c.run_id,
    OUTBOX.c.event_type,
    OUTBOX.c.webhook_id,
    OUTBOX.c.created_at,
    OUTBOX.c.attempts,
    OUTBOX.c.body,
)
"""What a claim returns of each row it took."""


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

    def claim(self, limit: int, lease: timedelta) -> list[Notification]:
        """Claim up to ``limit`` due rows for one delivery attempt each, the earliest due
        first, each its run's first unsettled row (see the module's docstring)."""
        now = self._now()
        earlier = OUTBOX.alias("earlier")
        picked = (
            select(OUTBOX.c.id)
            .where(
                OUTBOX.c.due_at.is_not(None),
                OUTBOX.c.due_at <= now,
                ~exists().where(
                    earlier.c.run_id == OUTBOX.c.run_id,
                    earlier.c.id < OUTBOX.c.id,
                    earlier.c.due_at.is_not(None),
                ),
            )
            .order_by(OUTBOX.c.due_at, OUTBOX.c.id)
            .limit(limit)
        )
        if self._ctx.conns.postgres:
            picked = picked.with_for_update(skip_locked=True)
        # not waiting for the disk: a claim lost to a crash is a row due again
        with self._ctx.conns.one(durable=False) as s:
            rows = s.execute(
                update(OUTBOX)
                .where(OUTBOX.c.id.in_(picked.scalar_subquery()))
                .values(due_at=now + lease, attempts=OUTBOX.c.attempts + 1)
                .returning(*TAKEN)
            ).all()
        return sorted((self._taken(row) for row in rows), key=lambda n: n.id)

    def _taken(self, row: Any) -> Notification:
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
        # only while no later attempt took it (this one's lease ran out meanwhile); not
        # waiting for the disk: a settlement lost to a crash of the database is a row
        # due again, delivered at least once
        with self._ctx.conns.one(durable=False) as s:
            s.execute(
                update(OUTBOX)
                .where(OUTBOX.c.id == taken.id, OUTBOX.c.attempts == taken.attempts)
                .values(body=self._cipher.seal_text(body), **values)
            )

    def recent_lags(self, limit: int = 1000) -> list[float]:
        """Seconds from the transition to the receiver's 2xx of the last ``limit``
        notifications delivered (newest rows first: the primary key serves it)."""
        with self._ctx.conns.one() as s:
            rows = s.execute(
                select(OUTBOX.c.created_at, OUTBOX.c.delivered_at)
                .where(OUTBOX.c.delivered_at.is_not(None))
                .order_by(OUTBOX.c.id.desc())
                .limit(limit)
            ).all()
        return [max(0.0, (row.delivered_at - row.created_at).total_seconds()) for row in rows]

    def counts(self) -> OutboxCounts:
        with self._ctx.conns.one() as s:
            due = s.scalar(select(func.count()).where(OUTBOX.c.due_at.is_not(None)))
            given_up = s.scalar(
                select(func.count()).where(
                    OUTBOX.c.due_at.is_(None), OUTBOX.c.delivered_at.is_(None)
                )
            )
        return OutboxCounts(int(due or 0), int(given_up or 0))
