"""The run store. This class owns all SQL; every status change is one guarded UPDATE."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

import psycopg
from pydantic import JsonValue
from sqlalchemy import (
    ColumnElement,
    Engine,
    Select,
    Table,
    and_,
    bindparam,
    case,
    create_engine,
    delete,
    event,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.dml import Insert, ReturningUpdate, Update
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.selectable import CTE, FromClause

from loop import StateError, SuspendedRunState, Usage
from persistence.crypto import SEALED_MARKS, StateCipher
from persistence.domain import (
    ACTIVE,
    TERMINAL,
    CallRecord,
    CallStatus,
    Claim,
    DecisionOutcome,
    DecisionRecord,
    LedgerEntry,
    Page,
    Reclaimed,
    Run,
    RunEvent,
    RunStatus,
)
from persistence.driver import DriverStatement
from persistence.models import AgentRun, DecisionRow, RunEventRow, ToolCallRow, from_db_text
from persistence.outbox import OUTBOX, OutboxStore, new_notification

Clock = Callable[[], datetime]
T = TypeVar("T")
Event = tuple[str, dict[str, JsonValue]]
"""An audit event (kind, payload) written in the same transaction as a transition."""


def utcnow() -> datetime:
    return datetime.now(UTC)


class UnknownRunError(LookupError):
    """No run has this id."""


class LeaseLostError(Exception):
    """The run is no longer leased to the segment that meant to write to it."""


class BadCursorError(ValueError):
    """The pagination cursor is malformed."""


def parse_run_id(run_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(run_id))
    except ValueError:
        return None


class RunRepository:
    def __init__(
        self, engine: Engine, *, cipher: StateCipher | None = None, clock: Clock = utcnow
    ) -> None:
        self.engine = engine
        self._autocommit: Engine | None = None
        self._leases: Engine | None = None
        self._holder: int | None = None
        self._held: dict[Engine, Connection] = {}
        if engine.dialect.name == "postgresql":
            self._autocommit = _autocommit(engine)
            self._leases = _autocommit(engine, synchronous_commit=False)
            event.listen(engine, "engine_disposed", self._dispose_siblings)
        self._cipher = cipher or StateCipher()
        self._now = clock
        self._statements: dict[Hashable, Any] = {}
        self.outbox = OutboxStore(engine, self._cipher, clock)

    def _dispose_siblings(self, _engine: Engine) -> None:
        """Their pools go with the engine's."""
        for held in self._held.values():
            held.close()
        self._held = {}
        for sibling in (self._autocommit, self._leases):
            if sibling is not None:
                sibling.dispose()

    def _statement(self, key: Hashable, build: Callable[[], T]) -> T:
        """A statement of the hot path, built once per shape (``key``) with bind
        parameters: building and cache-keying SQLAlchemy constructs costs more than
        executing them on a local database."""
        statement: T | None = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = build()
        return statement

    def _driver(self, key: Hashable, build: Callable[[], ClauseElement]) -> DriverStatement:
        """A hot PostgreSQL statement, sent through the driver (see ``persistence.driver``)."""
        dialect = self.engine.dialect
        return self._statement(("driver", key), lambda: DriverStatement(build(), dialect))

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """A transaction for several statements."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _one(self, engine: Engine | None = None) -> Iterator[Connection]:
        """For one statement. On PostgreSQL it runs in autocommit (on ``engine``, by
        default the durable one): a single statement is atomic on its own, and BEGIN
        and COMMIT would cost two more round trips. On SQLite (local, no round trips)
        it is a normal transaction, so it may hold several statements where PostgreSQL
        needs only one."""
        engine = engine or self._autocommit
        if engine is None:
            with self.engine.begin() as conn:
                yield conn
        elif threading.get_ident() == self._holder:
            held = self._held.get(engine)
            if held is None or held.closed or held.invalidated:
                held = self._held[engine] = engine.connect()
            conn = held
            try:
                yield conn
            except BaseException:
                del self._held[engine]  # whatever went wrong, the next statement starts afresh
                conn.close()
                raise
        else:
            with engine.connect() as conn:
                yield conn

    def hold_connections(self) -> None:
        """From now on the calling thread keeps its connections between statements
        (on PostgreSQL), instead of checking one out of the pool and back in for each:
        for a worker's segment thread, whose quick segment is two statements, that
        costs about as much as building them. Other threads use the pool as before.
        A connection whose statement fails is closed; the next one gets a fresh one."""
        self._holder = threading.get_ident()
        self._held = {}

    # -- runs -----------------------------------------------------------------

    def create(
        self,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
        first_event: tuple[str, dict[str, JsonValue]] | None = None,
    ) -> tuple[Run, bool]:
        """Insert a queued run, and with it its first event (kind, payload) as seq 1.
        With a known idempotency key, return the first run instead."""
        if idempotency_key is not None:
            existing = self._by_idempotency_key(idempotency_key)
            if existing is not None:
                return existing, False
        now = self._now()
        values: dict[str, Any] = {
            "id": uuid.uuid4(),
            "agent": agent,
            "status": RunStatus.QUEUED.value,
            "termination": None,
            "input": self._cipher.seal_text(input),
            "output": None,
            "error": None,
            "iterations": 0,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "turn_digest": None,
            "suspended_at": None,
            "expires_at": None,
            "lease_owner": None,
            "lease_expires_at": None,
            "attempts": 0,
            "event_seq": 0,
            "idempotency_key": idempotency_key,
            "metadata": dict(metadata or {}),
            "created_at": now,
            "updated_at": now,
            "version": 1,
        }
        if first_event is not None:
            values["event_seq"] = 1
        try:
            with self._one() as s:
                self._insert_run(s, values, first_event)
        except IntegrityError:
            if idempotency_key is None:
                raise
            existing = self._by_idempotency_key(idempotency_key)
            if existing is None:
                raise
            return existing, False
        return self._run(values | {"has_checkpoint": False}), True

    def _insert_run(
        self,
        s: Connection,
        values: dict[str, Any],
        first_event: tuple[str, dict[str, JsonValue]] | None,
    ) -> None:
        if first_event is None:
            s.execute(insert(RUNS).values(values))
            return
        kind, payload = first_event[0], self._cipher.seal_json(first_event[1])
        if self.engine.dialect.name == "postgresql":  # one statement
            columns = tuple(values)
            statement = self._driver(("create", columns), lambda: _create_statement(columns))
            params = {f"r_{c}": v for c, v in values.items()}
            statement.execute(s, params | {"e_kind": kind, "e_payload": payload})
        else:
            s.execute(insert(RUNS).values(values))
            event = {"seq": 1, "kind": kind, "payload": payload, "created_at": values["created_at"]}
            s.execute(insert(EVENTS).values(run_id=values["id"], **event))

    def _by_idempotency_key(self, key: str) -> Run | None:
        with self._one() as s:
            row = s.execute(_run_select().where(RUNS.c.idempotency_key == key)).first()
            return self._run(row._mapping) if row is not None else None

    def get(self, run_id: str) -> Run | None:
        rid = parse_run_id(run_id)
        if rid is None:
            return None
        with self._one() as s:
            row = s.execute(_run_select().where(RUNS.c.id == rid)).first()
            return self._run(row._mapping) if row is not None else None

    def _run(self, row: Mapping[Any, Any]) -> Run:
        """The run of ``row``, its sealed columns opened. One that cannot be opened (a
        key that was dropped) reads as empty, with ``unreadable`` saying why: it is
        this run's problem alone, and every other run reads on."""
        run = _to_run(row)
        sealed = {
            name: value
            for name, value in (("input", run.input), ("output", run.output), ("error", run.error))
            if value is not None and value.startswith(SEALED_MARKS)
        }
        if not sealed:
            return run
        opened: dict[str, Any] = {}
        for name, value in sealed.items():
            try:
                opened[name] = self._cipher.open_text(value, f"the run's {name}")
            except StateError as exc:
                opened[name] = "" if name == "input" else None
                opened["unreadable"] = str(exc)
        return dataclasses.replace(run, **opened)

    def require(self, run_id: str) -> Run:
        run = self.get(run_id)
        if run is None:
            raise UnknownRunError(f"no run has id {run_id!r}")
        return run

    def _transition(
        self,
        session: Connection,
        run_id: str,
        expected: Sequence[RunStatus],
        values: dict[str, Any],
        *,
        owner: str | None = None,
        turn_digest: str | None = None,
        expired: bool = False,
        lease_expired: bool = False,
        events: Sequence[Event] = (),
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
    ) -> bool:
        """The guarded UPDATE, and with it ``events`` (and the ``calls`` they tell of):
        the audit record of the transition exists exactly when the transition happened.
        ``notify``: the type of the outbound notification the transition causes, put in
        the outbox by the same statement."""
        rid = parse_run_id(run_id)
        if rid is None:
            return False
        statuses = tuple(s.value for s in expected)
        columns = tuple(sorted(values))
        key = (
            "transition", statuses, columns, owner is not None, turn_digest is not None,
            expired, lease_expired,
        )  # fmt: skip

        def build() -> Update:
            conditions = [RUNS.c.id == bindparam("rid"), _status_in(*statuses)]
            if turn_digest is not None:
                conditions.append(RUNS.c.turn_digest == bindparam("digest"))
            if expired:  # the approval's expiry, as of this statement
                conditions.append(RUNS.c.expires_at <= bindparam("now"))
            if lease_expired:  # a renewal that came first keeps the run
                conditions.append(RUNS.c.lease_expires_at < bindparam("now"))
            if owner is not None:
                conditions.append(RUNS.c.lease_owner == bindparam("owner"))
            return (
                update(RUNS)
                .where(*conditions)
                .values(
                    updated_at=bindparam("now"),
                    version=RUNS.c.version + 1,
                    **{c: bindparam(f"v_{c}", type_=RUNS.c[c].type) for c in columns},
                )
            )

        params: dict[str, Any] = {"rid": rid, "now": self._now(), "owner": owner}
        params |= {"digest": turn_digest} | {f"v_{c}": values[c] for c in columns}
        if events and self.engine.dialect.name == "postgresql":
            # a transition needs only to know whether it happened: no rows back
            sent = self._send_with_events(
                session, key, build, params, events, calls=calls, notify=notify, numbers=False
            )
            return sent.rowcount == len(events)
        if events:
            seqs = self._with_events(
                session, key, build, params, events, calls=calls, notify=notify
            )
            return bool(seqs)
        if calls or notify:
            raise ValueError(
                "calls and notifications are recorded with the events that tell of them"
            )
        return int(session.execute(self._statement(key, build), params).rowcount) == 1

    def claim(
        self, run_id: str, owner: str, lease: timedelta, *, take_over: str | None = None
    ) -> Claim | None:
        """queued → running with a lease. Exactly one concurrent caller wins.

        ``take_over`` names an earlier owner whose claim this caller continues
        (a task retried after the database went away mid-segment). The claim
        carries the sealed checkpoint, so a segment starts with one round trip.

        On PostgreSQL the claim's commit does not wait for its WAL to reach the disk
        (``synchronous_commit = off``; the lease renewals too). It is visible to every
        other session at once, so it excludes a duplicate exactly as a durable one
        would. Only a crash of the database server can lose it, and only with nothing
        after it: any later durable commit (the ``started`` record of a write, the
        segment's last transition) flushes the log up to itself, this claim included.
        A lost claim leaves the run as it was before the claim (queued, counted one
        attempt fewer), and the segment, whose connection died with the server,
        retries and claims it again.
        """
        rid = parse_run_id(run_id)
        if rid is None:
            return None
        now = self._now()
        params = {"rid": rid, "owner": owner, "expires": now + lease, "now": now}
        claim = _CLAIM if take_over is None else _TAKE_OVER
        if take_over is not None:
            params["previous"] = take_over
        with self._one(self._leases) as s:
            row: Sequence[Any] | None
            if self._leases is None:  # SQLite
                row = s.execute(claim, params).first()
            else:
                statement = self._driver(("claim", take_over is None), lambda: claim)
                row = statement.execute(s, params).fetchone()
        if row is None:
            return None
        _, agent, input, attempts, turn_digest, ledger, sealed = row
        input = from_db_text(input)  # the driver's rows skip the column types' processing
        unreadable = None
        try:
            input = self._cipher.open_text(input, "the run's input")
        except StateError as exc:  # the segment fails the run with it
            input, unreadable = "", str(exc)
        return Claim(
            str(rid), agent, input, attempts, turn_digest, bool(ledger), sealed, unreadable
        )

    def renew_lease(self, run_id: str, owner: str, lease: timedelta) -> bool:
        rid = parse_run_id(run_id)
        with self._one(self._leases) as s:
            result = s.execute(
                update(RUNS)
                .where(
                    RUNS.c.id == rid,
                    _status_in(RunStatus.RUNNING.value),
                    RUNS.c.lease_owner == owner,
                )
                .values(lease_expires_at=self._now() + lease)
            )
            return int(result.rowcount) == 1

    def suspend(
        self,
        run_id: str,
        owner: str,
        state: SuspendedRunState,
        expires_at: datetime | None,
        *,
        events: Sequence[Event] = (),
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
    ) -> bool:
        """running → waiting_for_approval, storing the checkpoint and the counters."""
        with self._one() as s:
            return self._transition(
                s,
                run_id,
                [RunStatus.RUNNING],
                {
                    "status": RunStatus.WAITING_FOR_APPROVAL.value,
                    "suspended_state": self._cipher.seal(state.to_json()),
                    "turn_digest": state.turn_digest,
                    "iterations": state.iterations,
                    "prompt_tokens": state.usage.prompt_tokens,
                    "completion_tokens": state.usage.completion_tokens,
                    "suspended_at": self._now(),
                    "expires_at": expires_at,
                    "lease_owner": None,
                    "lease_expires_at": None,
                    "attempts": 0,  # a segment ended: the next one is claimed afresh
                },
                owner=owner,
                events=events,
                calls=calls,
                notify=notify,
            )

    def checkpoint(
        self,
        run_id: str,
        owner: str,
        state: SuspendedRunState,
        *,
        events: Sequence[Event] = (),
        calls: Sequence[CallRecord] = (),
    ) -> bool:
        """Write-ahead: the running run's turn whose calls are about to act, stored
        (with the events so far) before any of them runs, so that a redone segment
        resumes from this turn with the same call ids. Only under the lease.

        On PostgreSQL its commit does not wait for the disk (as the claim's): no call
        acts before ``start_call``'s durable commit, which flushes the log up to
        itself, this checkpoint included. A crash before that loses the checkpoint
        and no side effect with it."""
        with self._one(self._leases) as s:
            return self._transition(
                s,
                run_id,
                [RunStatus.RUNNING],
                {
                    "suspended_state": self._cipher.seal(state.to_json()),
                    "turn_digest": state.turn_digest,
                    "iterations": state.iterations,
                    "prompt_tokens": state.usage.prompt_tokens,
                    "completion_tokens": state.usage.completion_tokens,
                },
                owner=owner,
                events=events,
                calls=calls,
            )

    def finish(
        self,
        run_id: str,
        status: RunStatus,
        *,
        owner: str | None = None,
        expected: Sequence[RunStatus] = (RunStatus.RUNNING,),
        termination: str | None = None,
        output: str | None = None,
        error: str | None = None,
        iterations: int | None = None,
        usage: Usage | None = None,
        events: Sequence[Event] = (),
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
    ) -> bool:
        """→ a terminal status; clears the lease, and the checkpoint unless the run failed.
        ``events`` (and ``calls``) are written in the same statement, only if the
        transition happened."""
        if not status.terminal:
            raise ValueError(f"finish needs a terminal status, not {status}")
        values: dict[str, Any] = {
            "status": status.value,
            "termination": termination,
            "output": None if output is None else self._cipher.seal_text(output),
            "error": None if error is None else self._cipher.seal_text(error),
            "lease_owner": None,
            "lease_expires_at": None,
            "expires_at": None,
        }
        if status is not RunStatus.FAILED:
            values |= {"suspended_state": None}
        if iterations is not None:
            values["iterations"] = iterations
        if usage is not None:
            values |= {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
        return self._transition_with(
            run_id, expected, values, events, owner=owner, calls=calls, notify=notify
        )

    def cancel(
        self, run_id: str, *, events: Sequence[Event] = (), notify: str | None = None
    ) -> bool:
        """Any non-terminal status → cancelled."""
        return self.finish(
            run_id,
            RunStatus.CANCELLED,
            expected=tuple(ACTIVE),
            termination="cancelled",
            events=events,
            notify=notify,
        )

    def expire(
        self,
        run_id: str,
        turn_digest: str,
        *,
        events: Sequence[Event] = (),
        notify: str | None = None,
    ) -> bool:
        """waiting_for_approval → cancelled, only while the run still waits on this turn
        and its approval has expired, as of this statement: a decision that won a
        moment before keeps its run."""
        values = {
            "status": RunStatus.CANCELLED.value,
            "termination": "cancelled",
            "suspended_state": None,
            "expires_at": None,
        }
        with self._one() as s:
            return self._transition(
                s,
                run_id,
                [RunStatus.WAITING_FOR_APPROVAL],
                values,
                turn_digest=turn_digest,
                expired=True,
                events=events,
                notify=notify,
            )

    def retry(self, run_id: str, *, events: Sequence[Event] = ()) -> bool:
        """failed → queued; the run continues from its last checkpoint."""
        values = {
            "status": RunStatus.QUEUED.value,
            "error": None,
            "termination": None,
            "attempts": 0,
        }
        return self._transition_with(run_id, [RunStatus.FAILED], values, events)

    def requeue(self, run_id: str, owner: str, *, events: Sequence[Event] = ()) -> bool:
        """running → queued by the lease owner (a transient error: try again later)."""
        values = {"status": RunStatus.QUEUED.value, "lease_owner": None, "lease_expires_at": None}
        return self._transition_with(run_id, [RunStatus.RUNNING], values, events, owner=owner)

    def _transition_with(
        self,
        run_id: str,
        expected: Sequence[RunStatus],
        values: dict[str, Any],
        events: Sequence[Event],
        *,
        owner: str | None = None,
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
    ) -> bool:
        """A guarded transition and the audit events that tell of it, atomically:
        whoever sees the new status also sees why."""
        with self._one() as s:
            return self._transition(
                s, run_id, expected, values, owner=owner, events=events, calls=calls, notify=notify
            )

    def reclaim_expired_leases(
        self, max_attempts: int, limit: int = 500, *, notify: bool = False
    ) -> Reclaimed:
        """running runs whose lease expired (their worker died) → queued, or failed after
        ``max_attempts`` claims. ``notify``: a run failed so tells of it in the outbox."""
        now = self._now()
        requeued: list[str] = []
        failed: list[str] = []
        with self._tx() as s:
            rows = s.execute(
                select(RUNS.c.id, RUNS.c.attempts, RUNS.c.lease_owner)
                .where(RUNS.c.status == RunStatus.RUNNING.value, RUNS.c.lease_expires_at < now)
                .limit(limit)
            ).all()
            for rid, attempts, owner in rows:
                give_up = attempts >= max_attempts
                values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
                error = (
                    f"the run's worker was lost {attempts} times "
                    f"(lease expired); giving up after {max_attempts} attempts"
                )
                if give_up:
                    values |= {
                        "status": RunStatus.FAILED.value,
                        "error": self._cipher.seal_text(error),
                    }
                else:
                    values["status"] = RunStatus.QUEUED.value
                events: list[Event] = [("failed", {"error": error})] if give_up else []
                if self._transition(
                    s,
                    str(rid),
                    [RunStatus.RUNNING],
                    values,
                    owner=owner,
                    lease_expired=True,
                    events=events,
                    notify="run.failed" if give_up and notify else None,
                ):
                    (failed if give_up else requeued).append(str(rid))
        return Reclaimed(tuple(requeued), tuple(failed))

    def stale_queued(self, older_than: timedelta, limit: int = 500) -> list[str]:
        """Runs that sat queued longer than ``older_than``: their wake-up was probably lost."""
        cutoff = self._now() - older_than
        with self._one() as s:
            ids = s.scalars(
                select(RUNS.c.id)
                .where(RUNS.c.status == RunStatus.QUEUED.value, RUNS.c.updated_at < cutoff)
                .order_by(RUNS.c.updated_at)
                .limit(limit)
            ).all()
        return [str(i) for i in ids]

    def touch_queued(self, run_ids: Sequence[str]) -> None:
        """Restart the "queued too long" clock of runs whose wake-up was just re-sent."""
        rids = [r for r in (parse_run_id(i) for i in run_ids) if r is not None]
        with self._one() as s:
            s.execute(
                update(RUNS)
                .where(RUNS.c.id.in_(rids), RUNS.c.status == RunStatus.QUEUED.value)
                .values(updated_at=self._now())
            )

    def expired_approvals(self, limit: int = 500) -> list[str]:
        now = self._now()
        with self._one() as s:
            ids = s.scalars(
                select(RUNS.c.id)
                .where(
                    RUNS.c.status == RunStatus.WAITING_FOR_APPROVAL.value,
                    RUNS.c.expires_at.is_not(None),
                    RUNS.c.expires_at < now,
                )
                .order_by(RUNS.c.expires_at)
                .limit(limit)
            ).all()
        return [str(i) for i in ids]

    def load_state(self, run: Run | Claim) -> SuspendedRunState:
        """The run's checkpoint, decrypted and verified. Raises ``StateError``."""
        stored = run.checkpoint
        if stored is None:
            with self._one() as s:
                stored = s.scalar(
                    select(RUNS.c.suspended_state).where(RUNS.c.id == parse_run_id(run.id))
                )
        if stored is None:
            raise StateError(f"run {run.id} has no checkpoint")
        state = SuspendedRunState.from_json(self._cipher.open(stored))
        if run.turn_digest is not None and state.turn_digest != run.turn_digest:
            raise StateError("suspended state was tampered with: its digest is not the run's")
        if state.run_id != run.id:
            raise StateError("suspended state was tampered with: it belongs to another run")
        return state

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """Newest first, keyset-paginated on (created_at, id)."""
        query = _run_select()
        if status is not None:
            query = query.where(RUNS.c.status == status.value)
        if agent is not None:
            query = query.where(RUNS.c.agent == agent)
        if cursor is not None:
            created, rid = _decode_cursor(cursor)
            query = query.where(
                or_(
                    RUNS.c.created_at < created,
                    and_(RUNS.c.created_at == created, RUNS.c.id < rid),
                )
            )
        query = query.order_by(RUNS.c.created_at.desc(), RUNS.c.id.desc()).limit(limit + 1)
        with self._one() as s:
            rows = s.execute(query).all()
            runs = tuple(self._run(r._mapping) for r in rows[:limit])
        next_cursor = _encode_cursor(runs[-1]) if len(rows) > limit else None
        return Page(runs, next_cursor)

    def finished_since(self, since: datetime) -> dict[RunStatus, int]:
        """Runs that reached a terminal status after ``since``, by status."""
        with self._one() as s:
            rows = s.execute(
                select(RUNS.c.status, func.count())
                .where(RUNS.c.status.in_([t.value for t in TERMINAL]), RUNS.c.updated_at >= since)
                .group_by(RUNS.c.status)
            ).all()
        return {RunStatus(status): int(n) for status, n in rows}

    def expired_lease_count(self) -> int:
        with self._one() as s:
            return int(
                s.execute(
                    select(func.count()).where(
                        RUNS.c.status == RunStatus.RUNNING.value,
                        RUNS.c.lease_expires_at < self._now(),
                    )
                ).scalar_one()
            )

    def oldest_waiting(self) -> datetime | None:
        with self._one() as s:
            value: datetime | None = s.scalar(
                select(func.min(RUNS.c.suspended_at)).where(
                    RUNS.c.status == RunStatus.WAITING_FOR_APPROVAL.value
                )
            )
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    def count_by_status(self) -> dict[RunStatus, int]:
        with self._one() as s:
            rows = s.execute(select(RUNS.c.status, func.count()).group_by(RUNS.c.status)).all()
        counts = dict.fromkeys(RunStatus, 0)
        counts.update({RunStatus(status): int(n) for status, n in rows})
        return counts

    # -- events ---------------------------------------------------------------

    def _at_least(self, column: Any, value: Any) -> Any:
        fn = func.max if self.engine.dialect.name == "sqlite" else func.greatest
        return fn(column, value)

    def append_event(
        self,
        run_id: str,
        kind: str,
        payload: dict[str, JsonValue],
        *,
        counters: tuple[int, Usage] | None = None,
    ) -> int:
        """Append to the run's audit stream; ``seq`` is gap-free and unique per run."""
        return self.append_events(run_id, [(kind, payload)], counters=counters)[0]

    def append_events(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        counters: tuple[int, Usage] | None = None,
        calls: Sequence[CallRecord] = (),
        owner: str | None = None,
    ) -> list[int]:
        """Append events in one statement; returns their ``seq``.

        ``counters`` (iterations, usage) are raised on the run row by the same
        statement, never lowered: a model call's event and its counters are one write.
        ``calls`` (read-only calls that ran) are recorded in the ledger by it too.
        ``owner``: only while the run is running under this lease, else
        ``LeaseLostError`` and nothing is written (a segment whose lease was taken
        over writes nothing more).
        """
        with self._one() as s:
            seqs = self._append(s, run_id, events, counters=counters, calls=calls, owner=owner)
        if seqs:
            return seqs
        if owner is not None and self.get(run_id) is not None:
            raise LeaseLostError(f"run {run_id} is no longer leased to {owner}")
        raise UnknownRunError(f"no run has id {run_id!r}")

    def _append(
        self,
        s: Connection,
        run_id: str,
        events: Sequence[Event],
        *,
        counters: tuple[int, Usage] | None = None,
        calls: Sequence[CallRecord] = (),
        owner: str | None = None,
    ) -> list[int]:
        def build() -> Update:
            bump = update(RUNS).where(RUNS.c.id == bindparam("rid"))
            if owner is not None:
                bump = bump.where(
                    _status_in(RunStatus.RUNNING.value), RUNS.c.lease_owner == bindparam("owner")
                )
            if counters is None:
                return bump
            return bump.values(
                iterations=self._at_least(RUNS.c.iterations, bindparam("iterations")),
                prompt_tokens=self._at_least(RUNS.c.prompt_tokens, bindparam("prompt")),
                completion_tokens=self._at_least(RUNS.c.completion_tokens, bindparam("completion")),
            )

        params: dict[str, Any] = {"rid": parse_run_id(run_id), "owner": owner}
        if counters is not None:
            iterations, usage = counters
            params |= {
                "iterations": iterations,
                "prompt": usage.prompt_tokens,
                "completion": usage.completion_tokens,
            }
        key = ("append", counters is not None, owner is not None)
        return self._with_events(s, key, build, params, events, calls=calls)

    def _with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Callable[[], Update],
        params: dict[str, Any],
        events: Sequence[Event],
        *,
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
    ) -> list[int]:
        """Run the UPDATE ``build`` makes (of at most one run; its shape is ``key``),
        reserving ``len(events)`` numbers of the run's event sequence in the same
        statement, and insert the events under them.

        Returns their numbers; none when the UPDATE matched no row. The sequence lives
        on the run row: the UPDATE takes the row lock, so concurrent writers queue and
        the numbers stay gap-free and unique. On PostgreSQL this is one statement (the
        UPDATE feeds the INSERT in a CTE); on SQLite, two in the caller's transaction.

        ``calls`` are recorded in the ledger by the same statement (on SQLite, one more),
        only if the UPDATE matched; a call already recorded keeps its first record.
        So is the outbound notification of type ``notify``, if any.
        """
        k, m = len(events), len(calls)
        if m and not k:
            raise ValueError("calls are recorded with the events that tell of them")

        if self.engine.dialect.name == "postgresql":
            sent = self._send_with_events(
                s, key, build, params, events, calls=calls, notify=notify, numbers=True
            )
            return sorted(int(seq) for (seq,) in sent)
        now = self._now()
        moved = self._statement(("moved", key, k), lambda: _reserving(build, k))
        row = s.execute(moved, params).first()
        if row is None:
            return []
        first = int(row.event_seq) - k + 1
        s.execute(
            insert(EVENTS),
            [
                {"run_id": row.id, "seq": first + i, "kind": kind,
                 "payload": self._cipher.seal_json(payload), "created_at": now}
                for i, (kind, payload) in enumerate(events)
            ],
        )  # fmt: skip
        if calls:
            record = sqlite_insert(CALLS).on_conflict_do_nothing(index_elements=_CALL_KEY)
            s.execute(
                record, [_call_row(call, self._cipher) | {"run_id": row.id} for call in calls]
            )
        if notify is not None:
            s.execute(insert(OUTBOX).values(new_notification(row.id, notify, now)))
        return list(range(first, first + k))

    def _send_with_events(
        self,
        s: Connection,
        key: Hashable,
        build: Callable[[], Update],
        params: dict[str, Any],
        events: Sequence[Event],
        *,
        calls: Sequence[CallRecord],
        notify: str | None = None,
        numbers: bool,
    ) -> psycopg.Cursor[Any]:
        """PostgreSQL: the one statement of ``_with_events``, returning the events'
        numbers, or (``numbers`` False) no rows, only its count."""
        k, m, o = len(events), len(calls), notify is not None

        def statement() -> Insert:
            moved = _reserving(build, k).cte("moved")
            inserted = _insert_events(moved, k, calls=m, notify=o)
            return inserted.returning(EVENTS.c.seq) if numbers else inserted

        now = self._now()
        params |= _event_params(events, now, self._cipher) | _call_params(calls, self._cipher)
        if notify is not None:
            params |= _notify_params(notify, now)
        return self._driver(("events", key, k, m, o, numbers), statement).execute(s, params)

    def events(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[RunEvent]:
        rid = parse_run_id(run_id)
        with self._one() as s:
            rows = s.execute(
                select(EVENTS)
                .where(EVENTS.c.run_id == rid, EVENTS.c.seq > after)
                .order_by(EVENTS.c.seq)
                .limit(limit)
            ).all()
            return [
                RunEvent(str(r.run_id), r.seq, r.kind, self._payload(r.payload), r.created_at)
                for r in rows
            ]

    def _payload(self, stored: dict[str, Any]) -> dict[str, JsonValue]:
        """An event's payload, opened; one that cannot be opened says so instead."""
        try:
            return self._cipher.open_json(stored, "an event's payload")
        except StateError as exc:
            return {"unreadable": str(exc)}

    # -- decisions ------------------------------------------------------------

    def record_decision(
        self,
        run_id: str,
        turn_digest: str,
        decision: dict[str, JsonValue],
        *,
        approver: str | None = None,
        webhook_id: str | None = None,
        events: Sequence[Event] = (),
        expiry: bool = False,
    ) -> DecisionOutcome:
        """One transaction: the decision row (unique per turn), waiting → queued, and
        ``events`` (the audit record of the decision).

        Exactly one concurrent caller records; the others learn whether theirs
        was the same decision (``duplicate``) or another (``conflict``).
        """
        rid = parse_run_id(run_id)
        if rid is None:
            return DecisionOutcome("not_found")
        now = self._now()
        row: dict[str, Any] = {
            "run_id": rid,
            "turn_digest": turn_digest,
            "decision": self._cipher.seal_json(decision),
            "approver": approver,
            "webhook_id": webhook_id,
            "created_at": now,
        }
        params = {"rid": rid, "digest": turn_digest, "now": now}
        params |= {f"d_{c}": v for c, v in row.items()}
        try:
            with self._one() as s:
                moving = functools.partial(_waiting_to_queued, expiry=expiry)
                if self.engine.dialect.name == "postgresql":
                    k = len(events)
                    statement = self._driver(
                        ("decide", k, expiry), lambda: _decide_statement(k, moving)
                    )
                    params |= _event_params(events, now, self._cipher) if events else {}
                    won = statement.execute(s, params).rowcount > 0
                elif events:
                    key = ("decide", expiry)
                    won = bool(self._with_events(s, key, moving, params, events))
                else:
                    moved = self._statement(("decide", expiry), moving)
                    won = int(s.execute(moved, params).rowcount) == 1
                if not won:
                    raise _NotWaitingError
                if self.engine.dialect.name != "postgresql":
                    s.execute(insert(DECISIONS).values(row))
        except (IntegrityError, _NotWaitingError):
            return self._explain_lost_decision(run_id, turn_digest, decision, webhook_id)
        return DecisionOutcome(
            "recorded", DecisionRecord(run_id, turn_digest, decision, approver, webhook_id, now)
        )

    def _explain_lost_decision(
        self,
        run_id: str,
        turn_digest: str,
        decision: dict[str, JsonValue],
        webhook_id: str | None,
    ) -> DecisionOutcome:
        with self._one() as s:
            if webhook_id is not None:
                replay = (
                    s.execute(select(DECISIONS).where(DECISIONS.c.webhook_id == webhook_id))
                    .mappings()
                    .first()
                )
                if replay is not None and str(replay["run_id"]) == run_id:
                    return DecisionOutcome("duplicate", _to_decision(replay, self._cipher))
                if replay is not None:
                    return DecisionOutcome(
                        "conflict", None, "this webhook-id was already used for another run"
                    )
            stored = self._decision(s, run_id, turn_digest)
            if stored is not None:
                if stored.decision == decision:
                    return DecisionOutcome("duplicate", stored)
                return DecisionOutcome(
                    "conflict", stored, "another decision for this turn was already recorded"
                )
            status = s.scalar(select(RUNS.c.status).where(RUNS.c.id == uuid.UUID(run_id)))
            if status is None:
                return DecisionOutcome("not_found")
            if status != RunStatus.WAITING_FOR_APPROVAL.value:
                return DecisionOutcome("conflict", None, f"run is {status}, not waiting")
            row = s.execute(
                select(RUNS.c.turn_digest, RUNS.c.expires_at).where(RUNS.c.id == uuid.UUID(run_id))
            ).one()
            if row.turn_digest != turn_digest:
                return DecisionOutcome(
                    "conflict", None, "turn_digest is not the digest of the turn that waits"
                )
            if row.expires_at is not None and row.expires_at <= self._now():
                return DecisionOutcome(
                    "conflict",
                    None,
                    f"the approval expired at {row.expires_at.isoformat()}",
                    expired=True,
                )
            return DecisionOutcome("conflict", None, "the run changed meanwhile; read it again")

    def _decision(self, s: Connection, run_id: str, turn_digest: str) -> DecisionRecord | None:
        row = _row_of(s, DECISIONS, run_id, turn_digest=turn_digest)
        return _to_decision(row, self._cipher) if row is not None else None

    def decision_for(self, run_id: str, turn_digest: str) -> DecisionRecord | None:
        with self._one() as s:
            return self._decision(s, run_id, turn_digest)

    # -- the tool-call ledger ---------------------------------------------------

    def start_call(
        self,
        run_id: str,
        call_id: str,
        tool: str,
        effect: str,
        arguments: dict[str, JsonValue],
        *,
        owner: str | None = None,
    ) -> tuple[LedgerEntry, bool]:
        """Record that a call is about to run (``True``), or return what the ledger
        already holds for it (``False``). ``owner``: only while the run is running under
        this lease (its row held for the statement, so a takeover waits for it or comes
        first), else ``LeaseLostError`` and nothing is recorded: a segment whose run was
        taken over starts no more calls."""
        row: dict[str, Any] = {
            "run_id": uuid.UUID(run_id),
            "call_id": call_id,
            "tool": tool,
            "effect": effect,
            "arguments": self._cipher.seal_json(arguments),
            "status": CallStatus.STARTED.value,
            "result": None,
            "is_error": False,
            "attempts": 1,
            "started_at": self._now(),
        }
        params = {f"s_{c}": v for c, v in row.items()} | {"owner": owner}
        guarded = owner is not None
        try:
            with self._one() as s:
                inserted = self._hot(
                    s, ("start_call", guarded), lambda: _start_call(guarded=guarded), params
                )
        except IntegrityError:
            existing = self.recorded_call(run_id, call_id)
            assert existing is not None, "a ledger row is never deleted while its run lives"
            return existing, False
        if inserted is None:
            raise LeaseLostError(
                f"run {run_id} is no longer leased to {owner}: call {call_id} not started"
            )
        return _to_entry(row, self._cipher), True

    def _hot(
        self, s: Connection, key: Hashable, build: Callable[[], Insert | Update], params: Any
    ) -> Sequence[Any] | None:
        """A statement of the hot path, built once: through the driver on PostgreSQL.
        Its first row, if it returns rows."""
        if self._autocommit is not None:
            cursor = self._driver(key, build).execute(s, params)
            return cursor.fetchone() if cursor.description else None
        result = s.execute(self._statement(key, build), params)
        return result.first() if result.returns_rows else None

    def recorded_call(self, run_id: str, call_id: str) -> LedgerEntry | None:
        with self._one() as s:
            row = _row_of(s, CALLS, run_id, call_id=call_id)
        return _to_entry(row, self._cipher) if row is not None else None

    def record_calls(self, run_id: str, calls: Sequence[CallRecord]) -> None:
        """Record calls that ran, with their results, in one write (reads: nothing to be
        in doubt about). A result recorded first by a concurrent duplicate stays."""
        rid = uuid.UUID(run_id)
        insert_ = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        with self._one() as s:
            s.execute(
                insert_(CALLS).on_conflict_do_nothing(index_elements=_CALL_KEY),
                [_call_row(call, self._cipher) | {"run_id": rid} for call in calls],
            )

    def restart_call(self, run_id: str, call_id: str) -> None:
        """An in-doubt call is being run again (its tool is safe to repeat)."""
        with self._one() as s:
            s.execute(
                update(CALLS)
                .where(CALLS.c.run_id == uuid.UUID(run_id), CALLS.c.call_id == call_id)
                .values(attempts=CALLS.c.attempts + 1, started_at=self._now())
            )

    def finish_call(self, run_id: str, call_id: str, result: str, *, is_error: bool) -> None:
        """A started call's result. On PostgreSQL its commit does not wait for the disk:
        were a crash of the server to lose it, the call would be found in doubt, and a
        write not repeated (the next durable commit of the run keeps it for good)."""
        status = CallStatus.FAILED if is_error else CallStatus.SUCCEEDED
        params = {
            "rid": uuid.UUID(run_id),
            "f_call_id": call_id,
            "f_status": status.value,
            "f_result": self._cipher.seal_text(result),
            "f_is_error": is_error,
            "now": self._now(),
        }
        with self._one(self._leases) as s:
            self._hot(s, "finish_call", _finish_call, params)

    def in_doubt_calls(self, run_id: str) -> list[LedgerEntry]:
        """Calls that started but never recorded a result: the worker died in between."""
        with self._one() as s:
            rows = s.execute(
                select(CALLS).where(
                    CALLS.c.run_id == uuid.UUID(run_id),
                    CALLS.c.status == CallStatus.STARTED.value,
                )
            ).mappings()
            return [_to_entry(r, self._cipher) for r in rows]

    def ledger(self, run_id: str) -> list[LedgerEntry]:
        with self._one() as s:
            rows = s.execute(
                select(CALLS).where(CALLS.c.run_id == uuid.UUID(run_id)).order_by(CALLS.c.id)
            ).mappings()
            return [_to_entry(r, self._cipher) for r in rows]

    # -- retention --------------------------------------------------------------

    def purge(
        self,
        older_than: timedelta,
        *,
        batch_size: int = 500,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Delete finished runs whose last activity is older than the window, with their
        events, ledger and decisions, one bounded batch per transaction."""
        cutoff = self._now() - older_than
        removed = 0
        finished = RUNS.c.status.in_([t.value for t in TERMINAL])
        while True:
            with self._tx() as s:
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
                    return removed
            removed += len(ids)
            if progress is not None:
                progress(removed)


class _NotWaitingError(Exception):
    """Internal: roll the decision back, the run was not waiting for this turn."""


RUNS = cast(Table, AgentRun.__table__)
DECISIONS = cast(Table, DecisionRow.__table__)
EVENTS = cast(Table, RunEventRow.__table__)
CALLS = cast(Table, ToolCallRow.__table__)
_RUN_COLUMNS = [c for c in RUNS.c if c.name != "suspended_state"]
_HAS_CHECKPOINT = RUNS.c.suspended_state.is_not(None).label("has_checkpoint")


# A waiting run's checkpoint comes with the row: whoever reads a waiting run
# (the run view, a decision) needs its pending turn, and this spares a query.
_WAITING_CHECKPOINT = case(
    (RUNS.c.status == RunStatus.WAITING_FOR_APPROVAL.value, RUNS.c.suspended_state), else_=None
).label("checkpoint")


def _status_in(*statuses: str) -> ColumnElement[bool]:
    """The guard of a transition of one run, found by its id: ``status IN (…)`` with
    '' (never a status) among the values, spelt as ORs (no list to expand per call),
    so that PostgreSQL cannot prove from it the predicate of a partial index by status.
    From ``status = 'queued'`` it can, and then, before it has statistics of a new
    table, it was seen to prefer that index, small as it looked, and filter it by id:
    every claim read every queued run's entry, and the dead entries of the runs that
    had been queued, so a backlog made each claim dearer."""
    return or_(*(RUNS.c.status == status for status in (*statuses, "")))


def _autocommit(engine: Engine, *, synchronous_commit: bool = True) -> Engine:
    """An autocommit engine over ``engine``'s database, with a pool of its own like
    ``engine``'s: its connections are born in autocommit, so no checkout switches them
    in and out of it. ``synchronous_commit=False``: its commits do not wait for the
    disk (see ``RunRepository.claim`` for when that is safe)."""
    sibling = create_engine(engine.url, pool=engine.pool.recreate(), isolation_level="AUTOCOMMIT")
    if not synchronous_commit:

        @event.listens_for(sibling, "connect")
        def _asynchronous(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("SET synchronous_commit = off")

    return sibling


def _claim(claimable: ColumnElement[bool]) -> ReturningUpdate[Any]:
    """queued → running; built once with bind parameters, as a segment's first statement
    it is the hottest one."""
    return (
        update(RUNS)
        .where(RUNS.c.id == bindparam("rid"), claimable)
        .values(
            status=RunStatus.RUNNING.value,
            lease_owner=bindparam("owner"),
            lease_expires_at=bindparam("expires"),
            attempts=RUNS.c.attempts + 1,
            updated_at=bindparam("now"),
            version=RUNS.c.version + 1,
        )
        .returning(
            RUNS.c.id,
            RUNS.c.agent,
            RUNS.c.input,
            RUNS.c.attempts,
            RUNS.c.turn_digest,
            select(CALLS.c.id).where(CALLS.c.run_id == bindparam("rid")).exists().label("ledger"),
            RUNS.c.suspended_state,
        )
    )


_CLAIM = _claim(_status_in(RunStatus.QUEUED.value))
_TAKE_OVER = _claim(
    or_(
        RUNS.c.status == RunStatus.QUEUED.value,
        and_(
            RUNS.c.status == RunStatus.RUNNING.value,
            RUNS.c.lease_owner == bindparam("previous"),
        ),
    )
)


def _reserving(build: Callable[[], Update], k: int) -> ReturningUpdate[Any, Any]:
    """The UPDATE ``build`` makes, raising the run's event sequence by ``k`` and
    returning the run's id and the raised sequence."""
    bumped = build().values(event_seq=RUNS.c.event_seq + k)
    return bumped.returning(RUNS.c.id, RUNS.c.event_seq)


_EVENT_COLUMNS = ["run_id", "seq", "kind", "payload", "created_at"]


def _insert_events(
    moved: CTE,
    k: int,
    source: FromClause | None = None,
    *,
    calls: int = 0,
    notify: bool = False,
) -> Insert:
    """INSERT ``k`` events (bound as ``_event_params`` names them) under the sequence
    numbers ``moved`` (a CTE of one run's UPDATE returning ``id`` and the raised
    ``event_seq``) reserved for them; and with them ``calls`` ledger records (bound as
    ``_call_params`` names them), in a CTE of their own; and ``notify``, an outbox row
    (bound as ``_notify_params`` names it), in another."""
    rows = [
        select(
            moved.c.id,
            moved.c.event_seq - (k - 1 - i),
            bindparam(f"kind_{i}", type_=EVENTS.c.kind.type),
            bindparam(f"payload_{i}", type_=EVENTS.c.payload.type),
            bindparam("event_at", type_=EVENTS.c.created_at.type),
        ).select_from(source if source is not None else moved)
        for i in range(k)
    ]
    statement = insert(EVENTS).from_select(_EVENT_COLUMNS, rows[0] if k == 1 else union_all(*rows))
    if calls:
        statement = statement.add_cte(_record_calls(moved, calls))
    if notify:
        statement = statement.add_cte(_record_notification(moved))
    return statement


def _record_notification(moved: CTE) -> CTE:
    """INSERT the outbox row of the run ``moved`` updated: the PostgreSQL form of
    ``new_notification``."""
    source = select(
        moved.c.id,
        bindparam("o_type", type_=OUTBOX.c.event_type.type),
        bindparam("o_webhook_id", type_=OUTBOX.c.webhook_id.type),
        bindparam("event_at", type_=OUTBOX.c.created_at.type),
        bindparam("event_at", type_=OUTBOX.c.due_at.type),
        literal(0, OUTBOX.c.attempts.type),
    ).select_from(moved)
    columns = ["run_id", "event_type", "webhook_id", "created_at", "due_at", "attempts"]
    return insert(OUTBOX).from_select(columns, source).cte("notified")


def _notify_params(event_type: str, now: datetime) -> dict[str, Any]:
    row = new_notification(None, event_type, now)
    return {"o_type": row["event_type"], "o_webhook_id": row["webhook_id"]}


def _start_call(*, guarded: bool) -> Insert:
    """A call's ``started`` record (bound as ``s_<column>``); ``guarded``: only while the
    run is running under the lease ``owner``, its row held for the statement."""
    columns = ["run_id", *_CALL_COLUMNS[:-1]]  # not finished
    source = select(*(bindparam(f"s_{c}", type_=CALLS.c[c].type) for c in columns))
    if guarded:
        leased = (
            select(RUNS.c.id)
            .where(
                RUNS.c.id == bindparam("s_run_id"),
                _status_in(RunStatus.RUNNING.value),
                RUNS.c.lease_owner == bindparam("owner"),
            )
            .with_for_update(read=True)
        )
        source = source.where(leased.exists())
    return insert(CALLS).from_select(columns, source).returning(CALLS.c.id)


def _finish_call() -> Update:
    return (
        update(CALLS)
        .where(
            CALLS.c.run_id == bindparam("rid"),
            CALLS.c.call_id == bindparam("f_call_id"),
            CALLS.c.status == CallStatus.STARTED.value,
        )
        .values(
            status=bindparam("f_status"),
            result=bindparam("f_result", type_=CALLS.c.result.type),
            is_error=bindparam("f_is_error"),
            finished_at=bindparam("now", type_=CALLS.c.finished_at.type),
        )
    )


_CALL_KEY = ["run_id", "call_id"]
_CALL_COLUMNS = (
    "call_id", "tool", "effect", "arguments", "status", "result", "is_error", "attempts",
    "started_at", "finished_at",
)  # fmt: skip


def _record_calls(moved: CTE, m: int) -> CTE:
    """INSERT ``m`` ledger records for the run ``moved`` updated; a call already
    recorded (by a duplicate of the segment) keeps its first record."""
    rows = [
        select(
            moved.c.id,
            *(bindparam(f"c{j}_{c}", type_=CALLS.c[c].type) for c in _CALL_COLUMNS),
        ).select_from(moved)
        for j in range(m)
    ]
    recorded = (
        pg_insert(CALLS)
        .from_select(["run_id", *_CALL_COLUMNS], rows[0] if m == 1 else union_all(*rows))
        .on_conflict_do_nothing(index_elements=_CALL_KEY)
    )
    return recorded.cte("recorded")


def _call_row(call: CallRecord, cipher: StateCipher) -> dict[str, Any]:
    status = CallStatus.FAILED if call.is_error else CallStatus.SUCCEEDED
    return {
        "call_id": call.call_id,
        "tool": call.tool,
        "effect": call.effect,
        "arguments": cipher.seal_json(call.arguments),
        "status": status.value,
        "result": cipher.seal_text(call.result),
        "is_error": call.is_error,
        "attempts": 1,
        "started_at": call.started_at,
        "finished_at": call.finished_at,
    }


def _call_params(calls: Sequence[CallRecord], cipher: StateCipher) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for j, call in enumerate(calls):
        params |= {f"c{j}_{c}": v for c, v in _call_row(call, cipher).items()}
    return params


def _create_statement(columns: Sequence[str]) -> Insert:
    """PostgreSQL: the run's row (``columns``, bound as ``r_<column>``) feeds its first
    event (``e_kind``, ``e_payload``; seq 1, at the run's creation), in one statement."""
    row = {c: bindparam(f"r_{c}", type_=RUNS.c[c].type) for c in columns}
    inserted = insert(RUNS).values(row).returning(RUNS.c.id).cte("inserted")
    source = select(
        inserted.c.id,
        literal(1, EVENTS.c.seq.type),
        bindparam("e_kind", type_=EVENTS.c.kind.type),
        bindparam("e_payload", type_=EVENTS.c.payload.type),
        bindparam("r_created_at", type_=EVENTS.c.created_at.type),
    )
    return insert(EVENTS).from_select(_EVENT_COLUMNS, source)


_DECISION_COLUMNS = ("run_id", "turn_digest", "decision", "approver", "webhook_id", "created_at")


def _decide_statement(k: int, moving: Callable[[], Update]) -> Insert:
    """PostgreSQL: the guarded UPDATE feeds the decision's INSERT, and both feed the
    ``k`` events' INSERT, in one round trip; a second decision for the turn violates
    the unique key and rolls all of it back. Its row count tells whether it won."""
    cte = _reserving(moving, k).cte("moved")
    columns = [c for c in _DECISION_COLUMNS if c != "run_id"]
    source = select(cte.c.id, *(bindparam(f"d_{c}", type_=DECISIONS.c[c].type) for c in columns))
    decided = insert(DECISIONS).from_select(["run_id", *columns], source)
    if not k:
        return decided
    both = decided.returning(DECISIONS.c.run_id).cte("decided")
    return _insert_events(cte, k, cte.join(both, both.c.run_id == cte.c.id))


def _waiting_to_queued(*, expiry: bool = False) -> Update:
    """The decision's guard: the run waits on this turn, and its approval has not
    expired (``expiry``: has, for the expiry's own decision) as of the statement."""
    if expiry:
        live = RUNS.c.expires_at <= bindparam("now")
    else:
        live = or_(RUNS.c.expires_at.is_(None), RUNS.c.expires_at > bindparam("now"))
    return (
        update(RUNS)
        .where(
            RUNS.c.id == bindparam("rid"),
            _status_in(RunStatus.WAITING_FOR_APPROVAL.value),
            RUNS.c.turn_digest == bindparam("digest"),
            live,
        )
        .values(
            status=RunStatus.QUEUED.value,
            expires_at=None,
            updated_at=bindparam("now"),
            version=RUNS.c.version + 1,
        )
    )


def _event_params(events: Sequence[Event], now: datetime, cipher: StateCipher) -> dict[str, Any]:
    params: dict[str, Any] = {"event_at": now}
    for i, (kind, payload) in enumerate(events):
        params |= {f"kind_{i}": kind, f"payload_{i}": cipher.seal_json(payload)}
    return params


def _row_of(s: Connection, table: Table, run_id: str, **key: Any) -> RowMapping | None:
    """The row of ``table`` that belongs to the run and has ``key`` (unique per run)."""
    where = [table.c.run_id == uuid.UUID(run_id), *(table.c[c] == v for c, v in key.items())]
    return s.execute(select(table).where(*where)).mappings().first()


def _run_select() -> Select[Any]:
    return select(*_RUN_COLUMNS, _HAS_CHECKPOINT, _WAITING_CHECKPOINT)


def _to_run(row: Mapping[Any, Any]) -> Run:
    return Run(
        id=str(row["id"]),
        agent=row["agent"],
        status=RunStatus(row["status"]),
        termination=row["termination"],
        input=row["input"],
        output=row["output"],
        error=row["error"],
        iterations=row["iterations"],
        usage=Usage(row["prompt_tokens"], row["completion_tokens"]),
        turn_digest=row["turn_digest"],
        has_checkpoint=bool(row["has_checkpoint"]),
        suspended_at=row["suspended_at"],
        expires_at=row["expires_at"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        attempts=row["attempts"],
        idempotency_key=row["idempotency_key"],
        metadata=dict(row["metadata"] or {}),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        version=row["version"],
        checkpoint=row.get("checkpoint"),
    )


def _to_decision(row: Mapping[Any, Any], cipher: StateCipher) -> DecisionRecord:
    return DecisionRecord(
        str(row["run_id"]),
        row["turn_digest"],
        cipher.open_json(row["decision"], "a decision"),
        row["approver"],
        row["webhook_id"],
        row["created_at"],
    )


def _to_entry(row: Mapping[Any, Any], cipher: StateCipher) -> LedgerEntry:
    result = row["result"]
    return LedgerEntry(
        str(row["run_id"]),
        row["call_id"],
        row["tool"],
        row["effect"],
        CallStatus(row["status"]),
        None if result is None else cipher.open_text(result, "a recorded result"),
        bool(row["is_error"]),
        row["attempts"],
    )


def _encode_cursor(run: Run) -> str:
    raw = f"{run.created_at.isoformat()}|{run.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, rid = raw.split("|")
        at = datetime.fromisoformat(created)
        if at.tzinfo is None:
            raise ValueError("the cursor's time has no timezone")
        return at, uuid.UUID(rid)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadCursorError(f"cursor {cursor!r} is not one this API returned") from exc
