"""The service's reads: runs, their pages and events, the store's figures, the
sweeper's health, the database's answer and schema. ``Service`` inherits them."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta

from sqlalchemy import text

from airlock.persistence import schema
from airlock.persistence.domain import Page, Run, RunEvent, RunStatus, StreamHead, WaitingMark
from airlock.persistence.schema import SchemaStatus
from airlock.persistence.store import Clock, RunStore
from airlock.workers.service.results import SWEEPER, Stats, SweeperHealth, stale_after
from airlock.workers.service.segments import Limits


def quantiles(values: Sequence[float]) -> tuple[float, float] | None:
    """The p50 and p99 of ``values`` (nearest rank), or ``None`` of none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2], ordered[
        min(len(ordered) - 1, len(ordered) * 99 // 100)
    ]


class Reads:
    """What reads the store and changes nothing (``Service`` provides the fields)."""

    store: RunStore
    clock: Clock
    limits: Limits

    def get_run(self, run_id: str) -> Run:
        """Raises ``UnknownRunError``."""
        return self.store.runs.require(run_id)

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        oldest_first: bool = False,
        statuses: Sequence[RunStatus] = (),
        metadata_contains: str | None = None,
    ) -> Page:
        """Newest first (or oldest first), keyset-paginated (see ``Queries.list_runs``).
        Raises ``BadCursorError``."""
        return self.store.queries.list_runs(
            status=status,
            agent=agent,
            limit=limit,
            cursor=cursor,
            oldest_first=oldest_first,
            statuses=statuses,
            metadata_contains=metadata_contains,
        )

    def events(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[RunEvent]:
        """The run's audit stream. Raises ``UnknownRunError``."""
        events = self.store.events.read(run_id, after=after, limit=limit)
        if not events:  # none after ``after``, or no such run: only then is the run read
            self.get_run(run_id)
        return events

    def stream_heads(self, run_ids: Collection[str]) -> dict[str, StreamHead]:
        """Where each of these runs' audit stream ends, and its status, in one
        statement; runs that are unknown (or purged) are missing."""
        return self.store.events.heads(run_ids)

    def events_of(self, cursors: Mapping[str, int], *, limit: int = 1000) -> list[RunEvent]:
        """The events of several runs, each after its cursor, in one statement, ordered
        by run and number (at most ``limit``: each run's a prefix of what it has)."""
        return self.store.events.read_many(cursors, limit=limit)

    def waiting_mark(self) -> WaitingMark:
        """A mark of the waiting queue that changes whenever a run enters or leaves it."""
        return self.store.queries.waiting_mark()

    def stats(self, *, finished_within: Sequence[int] = (5, 15, 60)) -> Stats:
        """The store's figures, for ``airlock stats`` and ``/metrics``."""
        queries, now = self.store.queries, self.clock()
        outbox = self.store.outbox.counts()
        return Stats(
            runs=queries.count_by_status(),
            oldest_waiting=queries.oldest_waiting(),
            expired_leases=queries.expired_lease_count(),
            finished={
                m: queries.finished_since(now - timedelta(minutes=m)) for m in finished_within
            },
            notifications_due=outbox.due,
            notifications_given_up=outbox.given_up,
            notification_lag=quantiles(self.store.outbox.recent_lags()),
            at=now,
            sweeper=self.sweeper(),
        )

    def sweeper(self) -> SweeperHealth:
        """When beat's sweeper last ran, and whether that is too long ago."""
        return SweeperHealth(
            self.store.beat.last_run(SWEEPER),
            self.clock(),
            stale_after(self.limits.sweep_interval),
        )

    def ping(self) -> None:
        """Raises unless the database answers."""
        with self.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def schema_status(self) -> SchemaStatus:
        """Whether the database's schema is this version's (``airlock.persistence.schema``)."""
        return schema.check(self.store.engine)
