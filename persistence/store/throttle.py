"""Failed sign-ins, counted per key (a client, a name) in a window that starts with the
first failure. An attempt *takes* a slot before its credential is checked, in one
guarded upsert: of concurrent attempts, on one process or many, at most ``limit`` get a
slot in a window; the others are refused until the window ends. An attempt that
succeeds gives its slot back (``refund``); a failed one keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, delete, or_, select, update

from airlock.persistence.store.context import Context
from airlock.persistence.store.sql import FAILURES


@dataclass(frozen=True, slots=True)
class Slot:
    key: str
    granted: bool
    """False: ``limit`` failures (or attempts in flight) already hold the window."""
    window_ends: datetime
    retry_after: float
    """Seconds until the window ends."""


class SignInThrottle:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def take(self, key: str, *, limit: int, window: timedelta) -> Slot:
        now = self._ctx.now()
        over = FAILURES.c.window_ends <= now
        upsert = self._ctx.sql.upsert(FAILURES)
        statement = (
            upsert.values(key=key, failures=1, window_ends=now + window)
            .on_conflict_do_update(
                index_elements=[FAILURES.c.key],
                set_={
                    "failures": case((over, 1), else_=FAILURES.c.failures + 1),
                    "window_ends": case((over, now + window), else_=FAILURES.c.window_ends),
                },
                where=or_(over, FAILURES.c.failures < limit),
            )
            .returning(FAILURES.c.window_ends)
        )
        with self._ctx.conns.one() as s:
            taken = s.execute(statement).first()
            granted = taken is not None
            ends = (
                taken.window_ends
                if taken is not None
                else s.scalar(select(FAILURES.c.window_ends).where(FAILURES.c.key == key))
            ) or now
        return Slot(key, granted, ends, (ends - now).total_seconds())

    def refund(self, slot: Slot) -> None:
        """Give back a slot whose attempt did not fail (unless its window ended since)."""
        with self._ctx.conns.one() as s:
            s.execute(
                update(FAILURES)
                .where(
                    FAILURES.c.key == slot.key,
                    FAILURES.c.window_ends == slot.window_ends,
                    FAILURES.c.failures > 0,
                )
                .values(failures=FAILURES.c.failures - 1)
            )

    def failures(self, key: str) -> int:
        """The failures counted against ``key`` in its current window."""
        with self._ctx.conns.one() as s:
            found = s.scalar(
                select(FAILURES.c.failures).where(
                    FAILURES.c.key == key, FAILURES.c.window_ends > self._ctx.now()
                )
            )
        return int(found or 0)

    def purge(self) -> int:
        """Delete the counts of windows that ended; how many."""
        with self._ctx.conns.one() as s:
            done = s.execute(delete(FAILURES).where(FAILURES.c.window_ends <= self._ctx.now()))
            return int(done.rowcount)
