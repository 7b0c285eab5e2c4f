"""Runs per status, as the triggers of migration 0011 keep them in ``run_tallies`` (see
``RunTallyRow``): what ``stats``, ``/metrics`` and the queue's live mark read, a few
rows whatever the number of runs, instead of counting the runs."""

from __future__ import annotations

from datetime import UTC

from sqlalchemy import func, select, text

from airlock.persistence.domain import RunStatus, WaitingMark
from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import RUNS, TALLIES

SLOT = {
    "postgresql": "get_byte(uuid_send(id), 15) % 16",
    "sqlite": "0",
}
"""A run's slot, as the triggers compute it (the last byte of its id, mod 16)."""


class Tallies:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def by_status(self) -> dict[RunStatus, int]:
        """How many runs have each status (every status, 0 where none)."""
        query = select(TALLIES.c.status, func.sum(TALLIES.c.runs)).group_by(TALLIES.c.status)
        with self._ctx.conns.one() as s:
            rows = s.execute(query).all()
        counts = dict.fromkeys(RunStatus, 0)
        counts.update({RunStatus(status): int(n) for status, n in rows if n})
        return counts

    def waiting_mark(self) -> WaitingMark:
        """The waiting queue's mark (``WaitingMark``): its slots' rows, in one statement."""
        query = select(
            func.coalesce(func.sum(TALLIES.c.runs), 0),
            func.max(TALLIES.c.changed_at),
            func.coalesce(func.sum(TALLIES.c.changes), 0),
        ).where(TALLIES.c.status == RunStatus.WAITING_FOR_APPROVAL.value)
        with self._ctx.conns.one() as s:
            count, changed, changes = s.execute(query).one()
        if changed is not None and changed.tzinfo is None:
            changed = changed.replace(tzinfo=UTC)
        return WaitingMark(int(count), changed, int(changes))

    def recount(self) -> None:
        """Count the runs again and set the tallies to it (a repair: the triggers keep
        them exact). Writers of runs wait until it commits; each row's ``changes`` goes
        on from where it was, so the queue's mark changes."""
        postgres = self._ctx.conns.postgres
        slot = SLOT["postgresql" if postgres else "sqlite"]
        counted = (
            f"SELECT status, {slot} AS slot, count(*) AS runs, max(updated_at) AS changed_at"
            f" FROM {RUNS.name} GROUP BY 1, 2"
        )
        with self._ctx.conns.tx() as s:
            if postgres:
                s.execute(text(f"LOCK TABLE {RUNS.name} IN SHARE ROW EXCLUSIVE MODE"))
            s.execute(TALLIES.update().values(runs=0, changes=TALLIES.c.changes + 1))
            s.execute(
                text(
                    "INSERT INTO run_tallies (status, slot, runs, changes, changed_at)"
                    f" SELECT status, slot, runs, 1, changed_at FROM ({counted}) AS counted"
                    " WHERE true ON CONFLICT (status, slot) DO UPDATE SET runs = excluded.runs"
                )
            )
