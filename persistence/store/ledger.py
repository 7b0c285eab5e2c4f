"""The tool-call ledger: one row per executed call, ``started`` → ``succeeded`` /
``failed`` with its result, which makes an approved call effectively-once."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from airlock.loop import Usage
from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import CallRecord, CallStatus, LedgerEntry
from airlock.persistence.store import sql
from airlock.persistence.store.common import Event, LeaseLostError
from airlock.persistence.store.context import Context
from airlock.persistence.store.events import Events
from airlock.persistence.store.retry import retried, retrying

CALLS = sql.CALLS


@dataclass(frozen=True)
class Prior:
    """What a segment has yet to write when a call that acts starts: its events, the
    read-only calls they tell of and the counters they raise. They are written with
    the call's ``started`` record, in its statement."""

    events: Sequence[Event]
    calls: Sequence[CallRecord] = ()
    counters: tuple[int, Usage] | None = None


class Ledger:
    def __init__(self, ctx: Context, events: Events) -> None:
        self._ctx = ctx
        self._events = events

    def start_call(
        self,
        run_id: str,
        call_id: str,
        tool: str,
        effect: str,
        arguments: dict[str, JsonValue],
        *,
        owner: str | None = None,
        prior: Prior | None = None,
    ) -> tuple[LedgerEntry, bool]:
        """Record that a call is about to run (``True``), or return what the ledger
        already holds for it (``False``). ``owner``: only while the run is running under
        this lease (its row held for the statement, so a takeover waits for it or comes
        first), else ``LeaseLostError`` and nothing is recorded: a segment whose run was
        taken over starts no more calls. Its commit is durable: it is what proves, to a
        redone segment, that the call may have acted.

        ``prior``: what the segment has yet to write, written first, in the same statement
        (one round trip, not two), under the same lease; also when the call was in the
        ledger already.

        Retried as a unit when the connection drops (``retry``). A first attempt that
        committed before its answer was lost left a ``started`` record of this ``owner``:
        the call has not run, so it is this caller's to run (``True``), not in doubt."""
        row = self._started(run_id, call_id, tool, effect, arguments, owner=owner)

        def unit(_attempt: int) -> tuple[LedgerEntry, bool]:
            entry, fresh = self._start_once(run_id, row, prior, owner)
            if not fresh and owner is not None and entry.started_by == owner:
                return entry, entry.status is CallStatus.STARTED
            return entry, fresh

        return retrying(self._ctx.retry, unit, what="starting a call")

    def _start_once(
        self, run_id: str, row: dict[str, Any], prior: Prior | None, owner: str | None
    ) -> tuple[LedgerEntry, bool]:
        if prior is not None and prior.events:
            return self._start_after(run_id, row, prior, owner)
        params = {f"s_{c}": v for c, v in row.items()} | {"owner": owner}
        guarded = owner is not None
        try:
            with self._ctx.conns.one() as s:
                key = ("start_call", guarded)
                inserted = self._ctx.sql.hot(
                    s, key, lambda: sql.start_call(guarded=guarded), params
                )
        except IntegrityError:
            existing = self._recorded(run_id, row["call_id"])
            assert existing is not None, "a ledger row is never deleted while its run lives"
            return existing, False
        if inserted is None:
            raise LeaseLostError(
                f"run {run_id} is no longer leased to {owner}: call {row['call_id']} not started"
            )
        return to_entry(row, self._ctx.cipher), True

    def _started(
        self,
        run_id: str,
        call_id: str,
        tool: str,
        effect: str,
        arguments: dict[str, JsonValue],
        *,
        owner: str | None,
    ) -> dict[str, Any]:
        """A call's ledger row as it starts."""
        return {
            "run_id": uuid.UUID(run_id),
            "call_id": call_id,
            "tool": tool,
            "effect": effect,
            "arguments": self._ctx.cipher.seal_json(arguments),
            "status": CallStatus.STARTED.value,
            "result": None,
            "is_error": False,
            "attempts": 1,
            "started_at": self._ctx.now(),
            "started_by": owner,
        }

    def _start_after(
        self, run_id: str, row: dict[str, Any], prior: Prior, owner: str | None
    ) -> tuple[LedgerEntry, bool]:
        if owner is None:
            raise ValueError("a segment's events are written under its lease: give the owner")
        write = functools.partial(
            self._events.write_events,
            run_id,
            prior.events,
            counters=prior.counters,
            calls=prior.calls,
            owner=owner,
        )
        try:
            write(start={c: v for c, v in row.items() if c != "run_id"})
        except IntegrityError:  # in the ledger already: what it holds
            existing = self._recorded(run_id, row["call_id"])
            assert existing is not None, "a ledger row is never deleted while its run lives"
            if existing.started_by != owner:  # a redone segment: its events, told again
                write()
            return existing, False
        return to_entry(row, self._ctx.cipher), True

    @retried
    def recorded_call(self, run_id: str, call_id: str) -> LedgerEntry | None:
        return self._recorded(run_id, call_id)

    def _recorded(self, run_id: str, call_id: str) -> LedgerEntry | None:
        with self._ctx.conns.one() as s:
            row = sql.row_of(s, CALLS, run_id, call_id=call_id)
        return to_entry(row, self._ctx.cipher) if row is not None else None

    @retried
    def record_calls(self, run_id: str, calls: Sequence[CallRecord]) -> None:
        """Record calls that ran, with their results, in one write (reads: nothing to be
        in doubt about). A result recorded first by a concurrent duplicate (or by this
        write's first attempt) stays."""
        rid = uuid.UUID(run_id)
        rows = [sql.call_row(call, self._ctx.cipher) | {"run_id": rid} for call in calls]
        with self._ctx.conns.one() as s:
            self._ctx.sql.record_calls(s, rows)

    @retried
    def restart_call(self, run_id: str, call_id: str) -> None:
        """An in-doubt call is being run again (its tool is safe to repeat)."""
        with self._ctx.conns.one() as s:
            s.execute(
                update(CALLS)
                .where(CALLS.c.run_id == uuid.UUID(run_id), CALLS.c.call_id == call_id)
                .values(attempts=CALLS.c.attempts + 1, started_at=self._ctx.now())
            )

    def finish_call(self, run_id: str, call_id: str, result: str, *, is_error: bool) -> None:
        """A started call's result. On PostgreSQL its commit does not wait for the disk:
        were a crash of the server to lose it, the call would be found in doubt, and a
        write not repeated (the next durable commit of the run keeps it for good).

        Nothing but this caller knows the result: it is retried while the database is
        away for the policy's ``result_seconds`` (a repeat changes nothing: the record is
        guarded on the call still ``started``)."""
        status = CallStatus.FAILED if is_error else CallStatus.SUCCEEDED
        params = {
            "rid": uuid.UUID(run_id),
            "f_call_id": call_id,
            "f_status": status.value,
            "f_result": self._ctx.cipher.seal_text(result),
            "f_is_error": is_error,
            "now": self._ctx.now(),
        }

        def unit(_attempt: int) -> None:
            with self._ctx.conns.one(durable=False) as s:
                self._ctx.sql.hot(s, "finish_call", sql.finish_call, params)

        policy = self._ctx.retry
        retrying(policy, unit, what="recording a call's result", seconds=policy.result_seconds)

    def in_doubt_calls(self, run_id: str) -> list[LedgerEntry]:
        """Calls that started but never recorded a result: the worker died in between."""
        return [e for e in self.entries(run_id) if e.status is CallStatus.STARTED]

    @retried
    def entries(self, run_id: str) -> list[LedgerEntry]:
        """The run's ledger, in the order its calls started."""
        with self._ctx.conns.one() as s:
            rows = s.execute(
                select(CALLS)
                .where(CALLS.c.run_id == uuid.UUID(run_id))
                # a write's started record and the reads before it share a statement,
                # which numbers its rows in no set order: the clock orders them
                .order_by(CALLS.c.started_at, CALLS.c.id)
            ).mappings()
            return [to_entry(r, self._ctx.cipher) for r in rows]


def to_entry(row: Mapping[Any, Any], cipher: StateCipher) -> LedgerEntry:
    result = row["result"]
    return LedgerEntry(
        run_id=str(row["run_id"]),
        call_id=row["call_id"],
        tool=row["tool"],
        effect=row["effect"],
        status=CallStatus(row["status"]),
        result=None if result is None else cipher.open_text(result, "a recorded result"),
        is_error=bool(row["is_error"]),
        attempts=row["attempts"],
        started_by=row.get("started_by"),
    )
