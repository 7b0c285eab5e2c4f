"""When each of beat's jobs last ran: the sweeper records its runs, so whether a beat
is alive is visible where the database is (``/readyz``, ``airlock stats``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import BEAT_JOBS


class BeatJobs:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def ran(self, name: str) -> datetime:
        """Record that the job ``name`` ran now (one upsert); when that is."""
        now = self._ctx.now()
        upsert = self._ctx.sql.upsert(BEAT_JOBS)
        statement = upsert.values(name=name, last_run_at=now).on_conflict_do_update(
            index_elements=[BEAT_JOBS.c.name], set_={"last_run_at": now}
        )
        with self._ctx.conns.one() as s:
            s.execute(statement)
        return now

    def last_run(self, name: str) -> datetime | None:
        """When the job ``name`` last ran; None if it never did."""
        with self._ctx.conns.one() as s:
            found: datetime | None = s.scalar(
                select(BEAT_JOBS.c.last_run_at).where(BEAT_JOBS.c.name == name)
            )
        return found
