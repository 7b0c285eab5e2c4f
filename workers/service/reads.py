"""The service's reads: runs, their pages and events, the store's figures, the
sweeper's health, the database's answer and schema. ``Service`` inherits them."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from functools import cached_property

from airlock.persistence import schema
from airlock.persistence.db import read_only_engine
from airlock.persistence.domain import Page, Run, RunEvent, RunStatus, StreamHead, WaitingMark
from airlock.persistence.schema import SchemaStatus
from airlock.persistence.store import Clock, GatewayFigures, RunStore
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

    @cached_property
    def reader(self) -> RunStore:
        """The store through which probes and figures read: on SQLite, over an engine
        that opens the file read-only (``airlock.persistence.db.read_only_engine``), so that
        looking creates nothing, not even the file; on PostgreSQL, the store itself."""
        engine = read_only_engine(self.store.engine)
        return self.store if engine is self.store.engine else RunStore(engine, clock=self.store.now)

    def stats(self, *, finished_within: Sequence[int] = (5, 15, 60)) -> Stats:
        """The store's figures, for ``airlock stats`` and ``/metrics`` (read-only)."""
        queries, now = self.reader.queries, self.clock()
        outbox = self.reader.outbox.counts()
        return Stats(
            runs=queries.count_by_status(),
            oldest_waiting=queries.oldest_waiting(),
            expired_leases=queries.expired_lease_count(),
            finished={
                m: queries.finished_since(now - timedelta(minutes=m)) for m in finished_within
            },
            notifications_due=outbox.due,
            notifications_given_up=outbox.given_up,
            notification_lag=quantiles(self.reader.outbox.recent_lags()),
            at=now,
            sweeper=self.sweeper(),
        )

    def gateway_figures(self) -> GatewayFigures:
        """The MCP gateway's held and returned calls, and their waits (read-only)."""
        return self.reader.gateway.figures()

    def sweeper(self) -> SweeperHealth:
        """When beat's sweeper last ran, and whether that is too long ago (read-only)."""
        return SweeperHealth(
            self.reader.beat.last_run(SWEEPER),
            self.clock(),
            stale_after(self.limits.sweep_interval),
        )

    def schema_status(self) -> SchemaStatus:
        """Whether the database can be reached and its schema is this version's
        (``airlock.persistence.schema``), read-only: an SQLite file that is not there is said to
        be absent, and is not made."""
        return schema.check(self.reader.engine)
