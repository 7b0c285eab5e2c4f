"""Retention: finished runs idle past the window are deleted, in bounded batches."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import delete, or_, select

from airlock.persistence.domain import TERMINAL
from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import GRANTS, RUNS


class Retention:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def purge(
        self,
        older_than: timedelta,
        *,
        batch_size: int = 500,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete finished runs whose last activity is older than the window, with their
        events, ledger, decisions and notifications, one bounded batch per transaction;
        and the standing grants that ended (expired or revoked) before the window."""
        cutoff = self._ctx.now() - older_than
        removed = 0
        finished = RUNS.c.status.in_([t.value for t in TERMINAL])
        while True:
            with self._ctx.conns.tx() as s:
                batch = select(RUNS.c.id).where(finished, RUNS.c.updated_at < cutoff)
                # one guarded DELETE: a run retried (or otherwise touched) since the batch
                # was chosen no longer matches, and keeps its events, ledger and decisions;
                # those of the runs it deletes go with them (ON DELETE CASCADE)
                ids = s.scalars(
                    delete(RUNS)
                    .where(
                        RUNS.c.id.in_(batch.limit(batch_size).scalar_subquery()),
                        finished,
                        RUNS.c.updated_at < cutoff,
                    )
                    .returning(RUNS.c.id)
                ).all()
                if not ids:
                    ended = or_(GRANTS.c.expires_at < cutoff, GRANTS.c.revoked_at < cutoff)
                    s.execute(delete(GRANTS).where(ended))
                    return removed
            removed += len(ids)
            if progress is not None:
                progress(removed)
