"""Where the two databases differ, decided once: ``PostgresStatements`` sends each use
case as one statement through the driver (CTEs feeding one another), and
``SqliteStatements`` sends it as a few SQLAlchemy statements in one local
transaction. The store's parts see only the ``Statements`` protocol."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import JsonValue
from sqlalchemy import Select, Table, func, insert
from sqlalchemy.dialects.postgresql import Insert as PgInsert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import Insert as SqliteInsert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.sql.dml import Insert, Update

from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import CallRecord
from airlock.persistence.store import sql
from airlock.persistence.store.common import Clock, Event
from airlock.persistence.store.connections import Connections

Build = Callable[[], Update]


@dataclass(frozen=True)
class Writes:
    """What a run's UPDATE carries with it, in the same statement: its audit events,
    the ledger records of the read-only calls they tell of, and the outbound
    notification (its type) the change causes."""

    events: Sequence[Event]
    calls: Sequence[CallRecord] = ()
    notify: str | None = None
    start: Mapping[str, Any] | None = None
    """The ``started`` ledger record of a call that acts (its columns but ``run_id``),
    written with the events that came before it. A call already in the ledger fails the
    whole write (``IntegrityError``)."""

    def __post_init__(self) -> None:
        if (self.calls or self.notify or self.start) and not self.events:
            raise ValueError(
                "calls and notifications are recorded with the events that tell of them"
            )


class Statements(Protocol):
    def hot(
        self, s: Connection, key: Hashable, build: Callable[[], Insert | Update], params: Any
    ) -> Sequence[Any] | None:
        """A statement of the hot path, built once; its first row, if it returns rows."""

    def read(
        self, s: Connection, key: Hashable, build: Callable[[], Select[Any]], params: Any
    ) -> Mapping[Any, Any] | None:
        """A SELECT of the hot path (a poll's), built once; its first row by column name."""

    def with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
    ) -> list[int]:
        """Run the UPDATE ``build`` makes (of at most one run; its shape is ``key``),
        reserving as many numbers of the run's event sequence as ``writes`` has events,
        and insert the events under them: their numbers, none when the UPDATE matched
        no row. The sequence lives on the run row, whose lock the UPDATE takes, so the
        numbers stay gap-free and unique. The ``writes``' calls are recorded in the
        ledger with them (a call already recorded keeps its first record), and its
        notification in the outbox, only if the UPDATE matched."""

    def transition_with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
    ) -> bool:
        """``with_events`` for a transition, which needs only to know it happened."""

    def insert_run(
        self, s: Connection, values: dict[str, Any], first_event: Event | None
    ) -> None: ...

    def decide(
        self,
        s: Connection,
        params: dict[str, Any],
        row: dict[str, Any],
        events: Sequence[Event],
        *,
        expiry: bool,
    ) -> bool:
        """waiting → queued with the decision ``row`` and its ``events``; whether it
        won. A second decision for the turn raises ``IntegrityError``."""

    def record_calls(self, s: Connection, rows: Sequence[dict[str, Any]]) -> None: ...

    def at_least(self, column: Any, value: Any) -> Any:
        """``column`` raised to ``value``, never lowered."""

    def upsert(self, table: Table) -> PgInsert | SqliteInsert:
        """The dialect's INSERT into ``table``, which takes ``on_conflict_do_update``."""


class _Statements:
    def __init__(self, conns: Connections, cipher: StateCipher, clock: Clock) -> None:
        self._conns = conns
        self._cipher = cipher
        self._now = clock

    def hot(
        self, s: Connection, key: Hashable, build: Callable[[], Insert | Update], params: Any
    ) -> Sequence[Any] | None:
        result = s.execute(self._conns.statement(key, build), params)
        return result.first() if result.returns_rows else None

    def read(
        self, s: Connection, key: Hashable, build: Callable[[], Select[Any]], params: Any
    ) -> Mapping[Any, Any] | None:
        return s.execute(self._conns.statement(key, build), params).mappings().first()


class PostgresStatements(_Statements):
    def with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
    ) -> list[int]:
        sent = self._send(s, key, build, params, writes, numbers=True)
        return sorted(int(seq) for (seq,) in sent)

    def transition_with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
    ) -> bool:
        # no rows back, only the count
        sent = self._send(s, key, build, params, writes, numbers=False)
        return sent.rowcount == len(writes.events)

    def _send(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
        *,
        numbers: bool,
    ) -> CursorResult[Any]:
        """One statement: the UPDATE feeds the events' INSERT (and the ledger's and the
        outbox's) in CTEs."""
        events, calls, notify, start = writes.events, writes.calls, writes.notify, writes.start
        k, m, o, a = len(events), len(calls), notify is not None, start is not None

        def statement() -> Insert:
            moved = sql.reserving(build, k).cte("moved")
            inserted = sql.insert_events(moved, k, calls=m, notify=o)
            if a:
                inserted = inserted.add_cte(sql.record_start(moved))
            return inserted.returning(sql.EVENTS.c.seq) if numbers else inserted

        now = self._now()
        params |= sql.event_params(events, now, self._cipher)
        params |= sql.call_params(calls, self._cipher)
        if notify is not None:
            params |= sql.notify_params(notify, now)
        if start is not None:
            params |= {f"s_{c}": v for c, v in start.items()}
        built = self._conns.statement(
            ("events", key, k, m, o, a, numbers),
            lambda: statement().execution_options(preserve_rowcount=True),
        )
        return s.execute(built, params)

    def insert_run(self, s: Connection, values: dict[str, Any], first_event: Event | None) -> None:
        if first_event is None:
            s.execute(insert(sql.RUNS).values(values))
            return
        kind, payload = first_event[0], self._cipher.seal_json(first_event[1])
        columns = tuple(values)
        statement = self._conns.statement(
            ("create", columns), lambda: sql.create_statement(columns)
        )
        params = {f"r_{c}": v for c, v in values.items()}
        s.execute(statement, params | {"e_kind": kind, "e_payload": payload})

    def decide(
        self,
        s: Connection,
        params: dict[str, Any],
        row: dict[str, Any],
        events: Sequence[Event],
        *,
        expiry: bool,
    ) -> bool:
        k = len(events)
        moving = functools.partial(sql.waiting_to_queued, expiry=expiry)
        statement = self._conns.statement(
            ("decide", k, expiry),
            # an INSERT's row count is kept only when asked (SQLAlchemy closes its cursor)
            lambda: sql.decide_statement(k, moving).execution_options(preserve_rowcount=True),
        )
        params = params | {f"d_{c}": v for c, v in row.items()}
        if events:
            params |= sql.event_params(events, params["now"], self._cipher)
        return s.execute(statement, params).rowcount > 0

    def record_calls(self, s: Connection, rows: Sequence[dict[str, Any]]) -> None:
        s.execute(pg_insert(sql.CALLS).on_conflict_do_nothing(index_elements=sql.CALL_KEY), rows)

    def at_least(self, column: Any, value: Any) -> Any:
        return func.greatest(column, value)

    def upsert(self, table: Table) -> PgInsert | SqliteInsert:
        return pg_insert(table)


class SqliteStatements(_Statements):
    def with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
    ) -> list[int]:
        """Two statements or more, in the caller's transaction."""
        events, calls, notify = writes.events, writes.calls, writes.notify
        k = len(events)
        now = self._now()
        moved = self._conns.statement(("moved", key, k), lambda: sql.reserving(build, k))
        row = s.execute(moved, params).first()
        if row is None:
            return []
        first = int(row.event_seq) - k + 1
        s.execute(
            insert(sql.EVENTS),
            [self._event_row(row.id, first + i, e, now) for i, e in enumerate(events)],
        )
        if calls:
            self.record_calls(
                s, [sql.call_row(c, self._cipher) | {"run_id": row.id} for c in calls]
            )
        if notify is not None:
            s.execute(insert(sql.OUTBOX).values(sql.new_notification(row.id, notify, now)))
        if writes.start is not None:
            s.execute(insert(sql.CALLS).values({**writes.start, "run_id": row.id}))
        return list(range(first, first + k))

    def _event_row(self, run_id: Any, seq: int, event: Event, now: Any) -> dict[str, Any]:
        kind, payload = event
        payload_: dict[str, JsonValue] = self._cipher.seal_json(payload)
        return {"run_id": run_id, "seq": seq, "kind": kind, "payload": payload_, "created_at": now}

    def transition_with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Build,
        params: dict[str, Any],
        writes: Writes,
    ) -> bool:
        return bool(self.with_events(s, key, build, params, writes))

    def insert_run(self, s: Connection, values: dict[str, Any], first_event: Event | None) -> None:
        s.execute(insert(sql.RUNS).values(values))
        if first_event is not None:
            event = self._event_row(values["id"], 1, first_event, values["created_at"])
            s.execute(insert(sql.EVENTS).values(event))

    def decide(
        self,
        s: Connection,
        params: dict[str, Any],
        row: dict[str, Any],
        events: Sequence[Event],
        *,
        expiry: bool,
    ) -> bool:
        moving = functools.partial(sql.waiting_to_queued, expiry=expiry)
        if events:
            won = bool(self.with_events(s, ("decide", expiry), moving, params, Writes(events)))
        else:
            moved = self._conns.statement(("decide", expiry), moving)
            won = int(s.execute(moved, params).rowcount) == 1
        if won:
            s.execute(insert(sql.DECISIONS).values(row))
        return won

    def record_calls(self, s: Connection, rows: Sequence[dict[str, Any]]) -> None:
        record = sqlite_insert(sql.CALLS).on_conflict_do_nothing(index_elements=sql.CALL_KEY)
        s.execute(record, rows)

    def at_least(self, column: Any, value: Any) -> Any:
        return func.max(column, value)

    def upsert(self, table: Table) -> PgInsert | SqliteInsert:
        return sqlite_insert(table)


def statements_for(conns: Connections, cipher: StateCipher, clock: Clock) -> Statements:
    """The one place the dialect is chosen."""
    if conns.postgres:
        return PostgresStatements(conns, cipher, clock)
    return SqliteStatements(conns, cipher, clock)
