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

WAITING = RunStatus.WAITING_FOR_APPROVAL.value


class Tallies:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def by_status(self) -> dict[RunStatus, int]:
        """How many runs have each status (every status, 0 where none)."""
        query = select(*(func.coalesce(func.sum(TALLIES.c[s.value]), 0) for s in RunStatus))
        with self._ctx.conns.one() as s:
            row = s.execute(query).one()
        return {status: int(n) for status, n in zip(RunStatus, row, strict=True)}

    def waiting_mark(self) -> WaitingMark:
        """The waiting queue's mark (``WaitingMark``): the slots' rows, in one statement."""
        query = select(
            func.coalesce(func.sum(TALLIES.c[WAITING]), 0),
            func.max(TALLIES.c.waiting_changed_at),
            func.coalesce(func.sum(TALLIES.c.waiting_changes), 0),
        )
        with self._ctx.conns.one() as s:
            count, changed, changes = s.execute(query).one()
        if changed is not None and changed.tzinfo is None:
            changed = changed.replace(tzinfo=UTC)
        return WaitingMark(int(count), changed, int(changes))

    def recount(self) -> None:
        """Count the runs again and set the tallies to it (a repair: the triggers keep
        them exact). Writers of runs wait until it commits; ``waiting_changes`` goes on,
        so the queue's mark changes."""
        postgres = self._ctx.conns.postgres
        slot = SLOT["postgresql" if postgres else "sqlite"]
        statuses = [s.value for s in RunStatus]
        counts = ", ".join(
            f"sum(CASE WHEN status = '{s}' THEN 1 ELSE 0 END) AS {s}" for s in statuses
        )
        with self._ctx.conns.tx() as s:
            if postgres:
                s.execute(text(f"LOCK TABLE {RUNS.name} IN SHARE ROW EXCLUSIVE MODE"))
            s.execute(
                TALLIES.update().values(
                    {TALLIES.c[v]: 0 for v in statuses}
                    | {TALLIES.c.waiting_changes: TALLIES.c.waiting_changes + 1}
                )
            )
            sets = ", ".join(f"{v} = c.{v}" for v in statuses)
            s.execute(
                text(
                    f"UPDATE run_tallies SET {sets}, waiting_changed_at = c.waiting_at FROM"
                    f" (SELECT {slot} AS slot, {counts}, max(CASE WHEN status = '{WAITING}'"
                    f" THEN updated_at END) AS waiting_at FROM {RUNS.name} GROUP BY 1) AS c"
                    " WHERE run_tallies.slot = c.slot"
                )
            )
