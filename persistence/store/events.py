"""The audit stream: events appended under gap-free numbers kept on the run's row."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Select, Text, Uuid, and_, any_, bindparam, cast, or_, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql.dml import Update

from airlock.loop import StateError, Usage
from airlock.persistence.domain import CallRecord, RunEvent, RunStatus, StreamHead
from airlock.persistence.store import sql
from airlock.persistence.store.common import Event, LeaseLostError, UnknownRunError, parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.dialects import Writes
from airlock.persistence.store.retry import retried
from airlock.persistence.store.runs import Runs

RUNS, EVENTS = sql.RUNS, sql.EVENTS


class Events:
    def __init__(self, ctx: Context, runs: Runs) -> None:
        self._ctx = ctx
        self._runs = runs

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

    @retried
    def append_events(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        counters: tuple[int, Usage] | None = None,
        calls: Sequence[CallRecord] = (),
        owner: str | None = None,
    ) -> list[int]:
        """``write_events``, retried as a unit when the connection drops (events whose
        first write committed before its answer was lost are told twice)."""
        return self.write_events(run_id, events, counters=counters, calls=calls, owner=owner)

    def write_events(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        counters: tuple[int, Usage] | None = None,
        calls: Sequence[CallRecord] = (),
        owner: str | None = None,
        start: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Append events in one statement; returns their ``seq``.

        ``counters`` (iterations, usage) are raised on the run row by the same
        statement, never lowered: a model call's event and its counters are one write.
        ``calls`` (read-only calls that ran) are recorded in the ledger by it too.
        ``owner``: only while the run is running under this lease, else
        ``LeaseLostError`` and nothing is written (a segment whose lease was taken
        over writes nothing more). ``start``: a call's ``started`` record (see
        ``Ledger.start_call``).
        """
        params: dict[str, Any] = {"rid": parse_run_id(run_id), "owner": owner}
        if counters is not None:
            iterations, usage = counters
            params |= {
                "iterations": iterations,
                "prompt": usage.prompt_tokens,
                "completion": usage.completion_tokens,
            }
        key = ("append", counters is not None, owner is not None)
        writes = Writes(events, calls, start=start)
        build = self._bump(counters is not None, guarded=owner is not None)
        with self._ctx.conns.one() as s:
            seqs = self._ctx.sql.with_events(s, key, build, params, writes)
        if seqs:
            return seqs
        if owner is not None and self._runs.get(run_id) is not None:
            raise LeaseLostError(f"run {run_id} is no longer leased to {owner}")
        raise UnknownRunError(f"no run has id {run_id!r}")

    def _bump(self, counters: bool, *, guarded: bool) -> Callable[[], Update]:
        at_least = self._ctx.sql.at_least

        def build() -> Update:
            bump = update(RUNS).where(RUNS.c.id == bindparam("rid"))
            if guarded:
                bump = bump.where(
                    sql.status_in(RunStatus.RUNNING.value),
                    RUNS.c.lease_owner == bindparam("owner"),
                )
            if not counters:
                return bump
            return bump.values(
                iterations=at_least(RUNS.c.iterations, bindparam("iterations")),
                prompt_tokens=at_least(RUNS.c.prompt_tokens, bindparam("prompt")),
                completion_tokens=at_least(RUNS.c.completion_tokens, bindparam("completion")),
            )

        return build

    def read(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[RunEvent]:
        """The run's events after ``after``, in order."""
        rid = parse_run_id(run_id)
        with self._ctx.conns.one() as s:
            rows = s.execute(
                select(EVENTS)
                .where(EVENTS.c.run_id == rid, EVENTS.c.seq > after)
                .order_by(EVENTS.c.seq)
                .limit(limit)
            ).all()
        return [self._event(r) for r in rows]

    def read_many(self, cursors: Mapping[str, int], *, limit: int = 1000) -> list[RunEvent]:
        """The events of several runs, each after its own cursor, in one statement:
        ordered by run and number, at most ``limit`` in all (so each run's are a
        prefix of what it has after its cursor)."""
        wanted = [(rid, after) for r, after in cursors.items() if (rid := parse_run_id(r))]
        if not wanted:
            return []
        query = (
            select(EVENTS)
            .where(or_(*(and_(EVENTS.c.run_id == rid, EVENTS.c.seq > a) for rid, a in wanted)))
            .order_by(EVENTS.c.run_id, EVENTS.c.seq)
            .limit(limit)
        )
        with self._ctx.conns.one() as s:
            rows = s.execute(query).all()
        return [self._event(r) for r in rows]

    def heads(self, run_ids: Collection[str]) -> dict[str, StreamHead]:
        """For each of these runs that exists, its status and last event's number, in
        one statement (a run missing from the answer is unknown, or was purged). On
        PostgreSQL the ids go as one array (``= ANY``) and come back as text: a
        statement built once, where an ``IN`` list of a thousand ids cost twice the
        CPU."""
        ids = {rid for r in run_ids if (rid := parse_run_id(r)) is not None}
        if not ids:
            return {}
        postgres = self._ctx.conns.postgres
        query = self._ctx.conns.statement(("heads", postgres), lambda: _heads(postgres))
        with self._ctx.conns.one() as s:
            rows = s.execute(query, {"ids": list(ids)}).all()
        return {
            str(rid): StreamHead(str(rid), RunStatus(status), int(seq or 0))
            for rid, status, seq in rows
        }

    def _event(self, r: Any) -> RunEvent:
        return RunEvent(
            run_id=str(r.run_id),
            seq=r.seq,
            kind=r.kind,
            payload=self._payload(r.payload),
            created_at=r.created_at,
        )

    def _payload(self, stored: dict[str, Any]) -> dict[str, JsonValue]:
        """An event's payload, opened; one that cannot be opened says so instead."""
        try:
            return self._ctx.cipher.open_json(stored, "an event's payload")
        except StateError as exc:
            return {"unreadable": str(exc)}


def _heads(postgres: bool) -> Select[Any]:
    """The heads of the runs ``:ids`` (``Events.heads``)."""
    if not postgres:
        query = select(RUNS.c.id, RUNS.c.status, RUNS.c.event_seq)
        return query.where(RUNS.c.id.in_(bindparam("ids", expanding=True)))
    query = select(cast(RUNS.c.id, Text()), RUNS.c.status, RUNS.c.event_seq)
    return query.where(RUNS.c.id == any_(bindparam("ids", type_=ARRAY(Uuid()))))
