"""Transitions: every status change is one guarded UPDATE (``… WHERE id = :id AND
status = :expected …``), written with the audit events that tell of it, so whoever
sees the new status also sees why, and a caller that lost the race changes nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, select, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.dml import Update

from airlock.loop import StateError, SuspendedRunState, Usage
from airlock.persistence.domain import ACTIVE, CallRecord, Claim, Reclaimed, RunStatus
from airlock.persistence.store import sql
from airlock.persistence.store.claims import ClaimAttempt
from airlock.persistence.store.common import Event, parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.dialects import Writes
from airlock.persistence.store.guards import RUNNING, Guard, landed
from airlock.persistence.store.retry import retrying

RUNS = sql.RUNS
RENEW_CHUNK = 500
"""Leases renewed per statement (bounds its parameters)."""


class Transitions:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def move(
        self,
        s: Connection,
        run_id: str,
        guard: Guard,
        values: dict[str, Any],
        *,
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
        columns = tuple(sorted(values))

        def build() -> Update:
            return (
                update(RUNS)
                .where(*guard.conditions())
                .values(
                    updated_at=bindparam("now"),
                    version=RUNS.c.version + 1,
                    **{c: bindparam(f"v_{c}", type_=RUNS.c[c].type) for c in columns},
                )
            )

        params: dict[str, Any] = {"rid": rid, "now": self._ctx.now(), "owner": guard.owner}
        params |= {"digest": guard.turn_digest} | {f"v_{c}": values[c] for c in columns}
        key = guard.shape(columns)
        writes = Writes(events, calls, notify)
        if events:
            return self._ctx.sql.transition_with_events(s, key, build, params, writes)
        return int(s.execute(self._ctx.conns.statement(key, build), params).rowcount) == 1

    def _move_one(self, run_id: str, guard: Guard, values: dict[str, Any], **kwargs: Any) -> bool:
        """``move`` in a statement of its own, retried as a unit when the connection drops.
        A repeat first reads whether the first attempt landed (it committed, its answer
        was lost): its guard would now refuse it, and its events are written already."""

        def unit(attempt: int) -> bool:
            if attempt and landed(self._ctx, run_id, values):
                return True
            with self._ctx.conns.one() as s:
                return self.move(s, run_id, guard, values, **kwargs)

        return retrying(self._ctx.retry, unit, what="a run's transition")

    def claim(
        self, run_id: str, owner: str, lease: timedelta, *, take_over: str | None = None,
        adopt: bool = False,
    ) -> Claim | None:  # fmt: skip
        """queued → running with a lease. Exactly one concurrent caller wins.

        ``take_over`` names an earlier owner whose claim this caller continues (a task
        retried after the database went away mid-segment); ``adopt``: that owner ran
        no call it did not record, so its calls ``started`` (never run) become this
        owner's (``ClaimAttempt``). The claim carries the sealed checkpoint, so a
        segment starts with one round trip.

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
        attempt = ClaimAttempt(self._ctx, rid, owner, lease, take_over, adopt)
        row = retrying(self._ctx.retry, attempt, what="claiming a run")
        if row is None:
            return None
        _, agent, input, attempts, turn_digest, ledger, sealed, decision, approver, trace = row
        unreadable = None
        try:
            input = self._ctx.cipher.open_text(input, "the run's input")
        except StateError as exc:  # the segment fails the run with it
            input, unreadable = "", str(exc)
        return Claim(
            id=str(rid),
            agent=agent,
            input=input,
            attempts=attempts,
            turn_digest=turn_digest,
            ledger=bool(ledger),
            checkpoint=sealed,
            unreadable=unreadable,
            decision=json.loads(decision) if isinstance(decision, str) else decision,
            approver=approver,
            trace_context=trace,
        )

    def renew_lease(self, run_id: str, owner: str, lease: timedelta) -> bool:
        return run_id in self.renew_leases({run_id: owner}, lease)

    def renew_leases(
        self, held: Mapping[str, str], lease: timedelta, *, apart: bool = False
    ) -> set[str]:
        """Renew the leases of many running runs (run id → its owner) in one statement
        per ``RENEW_CHUNK`` of them; the ids renewed. A run no longer running, or
        whose lease another owner holds, is not. ``apart``: on the connection kept
        for the process's lease renewer (``Connections.apart``)."""
        renewed: set[str] = set()
        pairs = [(rid, owner) for run_id, owner in held.items() if (rid := parse_run_id(run_id))]
        for start in range(0, len(pairs), RENEW_CHUNK):
            chunk = pairs[start : start + RENEW_CHUNK]
            statement = (
                update(RUNS)
                .where(
                    tuple_(RUNS.c.id, RUNS.c.lease_owner).in_(chunk),
                    sql.status_in(RunStatus.RUNNING.value),
                )
                .values(lease_expires_at=self._ctx.now() + lease)
                .returning(RUNS.c.id)
            )
            conns = self._ctx.conns
            with conns.apart() if apart else conns.one(durable=False) as s:
                renewed.update(str(rid) for rid in s.execute(statement).scalars())
        return renewed

    def _counters(self, state: SuspendedRunState) -> dict[str, Any]:
        return {
            "suspended_state": self._ctx.cipher.seal(state.to_json()),
            "turn_digest": state.turn_digest,
            "iterations": state.iterations,
            "prompt_tokens": state.usage.prompt_tokens,
            "completion_tokens": state.usage.completion_tokens,
        }

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
        values, guard = self.suspension(state, expires_at), Guard(RUNNING, owner=owner)
        return self._move_one(run_id, guard, values, events=events, calls=calls, notify=notify)

    def suspension(self, state: SuspendedRunState, expires_at: datetime | None) -> dict[str, Any]:
        """What a suspension writes to the run's row (``attempts``: a segment ended, the
        next one is claimed afresh)."""
        waiting = RunStatus.WAITING_FOR_APPROVAL.value
        return self._counters(state) | {"status": waiting, "suspended_at": self._ctx.now()} | {
            "expires_at": expires_at, "lease_owner": None, "lease_expires_at": None, "attempts": 0
        }  # fmt: skip

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
        acts before ``Ledger.start_call``'s durable commit, which flushes the log up
        to itself, this checkpoint included. A crash before that loses the checkpoint
        and no side effect with it."""
        values, guard = self._counters(state), Guard(RUNNING, owner=owner)

        def unit(attempt: int) -> bool:
            if attempt and landed(self._ctx, run_id, values | {"status": RunStatus.RUNNING.value}):
                return True
            with self._ctx.conns.one(durable=False) as s:
                return self.move(s, run_id, guard, values, events=events, calls=calls)

        return retrying(self._ctx.retry, unit, what="a checkpoint")

    def finish(
        self,
        run_id: str,
        status: RunStatus,
        *,
        owner: str | None = None,
        expected: Sequence[RunStatus] = RUNNING,
        termination: str | None = None,
        output: str | None = None,
        error: str | None = None,
        iterations: int | None = None,
        usage: Usage | None = None,
        events: Sequence[Event] = (),
        calls: Sequence[CallRecord] = (),
        notify: str | None = None,
        unsuspended: bool = False,
    ) -> bool:
        """→ a terminal status; clears the lease, and the checkpoint unless the run failed.
        ``events`` (and ``calls``) are written in the same statement, only if the
        transition happened; with ``unsuspended``, only if the run never suspended."""
        if not status.terminal:
            raise ValueError(f"finish needs a terminal status, not {status}")
        seal = self._ctx.cipher.seal_text
        values: dict[str, Any] = {
            "status": status.value,
            "termination": termination,
            "output": None if output is None else seal(output),
            "error": None if error is None else seal(error),
            "lease_owner": None,
            "lease_expires_at": None,
            "expires_at": None,
        }
        if status is not RunStatus.FAILED:
            values["suspended_state"] = None
        if iterations is not None:
            values["iterations"] = iterations
        if usage is not None:
            values |= {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
        guard = Guard(tuple(expected), owner=owner, unsuspended=unsuspended)
        return self._move_one(run_id, guard, values, events=events, calls=calls, notify=notify)

    def cancel(
        self,
        run_id: str,
        *,
        expected: Sequence[RunStatus] = tuple(ACTIVE),
        events: Sequence[Event] = (),
        notify: str | None = None,
        unsuspended: bool = False,
    ) -> bool:
        """A non-terminal status (one of ``expected``) → cancelled; with ``unsuspended``,
        only while the run never suspended (none of its calls was decided)."""
        return self.finish(
            run_id,
            RunStatus.CANCELLED,
            expected=expected,
            termination="cancelled",
            events=events,
            notify=notify,
            unsuspended=unsuspended,
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
        guard = Guard((RunStatus.WAITING_FOR_APPROVAL,), turn_digest=turn_digest, expired=True)
        return self._move_one(run_id, guard, values, events=events, notify=notify)

    def retry(self, run_id: str, *, events: Sequence[Event] = ()) -> bool:
        """failed → queued; the run continues from its last checkpoint."""
        values = {
            "status": RunStatus.QUEUED.value,
            "error": None,
            "termination": None,
            "attempts": 0,
        }
        return self._move_one(run_id, Guard((RunStatus.FAILED,)), values, events=events)

    def requeue(self, run_id: str, owner: str, *, events: Sequence[Event] = ()) -> bool:
        """running → queued by the lease owner (a transient error: try again later)."""
        values = {"status": RunStatus.QUEUED.value, "lease_owner": None, "lease_expires_at": None}
        return self._move_one(run_id, Guard(RUNNING, owner=owner), values, events=events)

    def reclaim_expired_leases(
        self, max_attempts: int, limit: int = 500, *, notify: bool = False
    ) -> Reclaimed:
        """running runs whose lease expired (their worker died) → queued, or failed after
        ``max_attempts`` claims. ``notify``: a run failed so tells of it in the outbox.
        Each is guarded on its lease still being expired, and on the owner read: a
        renewal that lands between the SELECT and the UPDATE keeps the run."""
        requeued: list[str] = []
        failed: list[str] = []
        with self._ctx.conns.tx() as s:
            rows = s.execute(
                select(RUNS.c.id, RUNS.c.attempts, RUNS.c.lease_owner)
                .where(
                    RUNS.c.status == RunStatus.RUNNING.value,
                    RUNS.c.lease_expires_at < self._ctx.now(),
                )
                .limit(limit)
            ).all()
            for rid, attempts, owner in rows:
                give_up = attempts >= max_attempts
                if self._reclaim(s, str(rid), attempts, owner, max_attempts, notify=notify):
                    (failed if give_up else requeued).append(str(rid))
        return Reclaimed(tuple(requeued), tuple(failed))

    def _reclaim(
        self,
        s: Connection,
        run_id: str,
        attempts: int,
        owner: str,
        max_attempts: int,
        *,
        notify: bool,
    ) -> bool:
        guard = Guard(RUNNING, owner=owner, lease_expired=True)
        values: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}
        if attempts < max_attempts:
            return self.move(s, run_id, guard, values | {"status": RunStatus.QUEUED.value})
        error = (
            f"the run's worker was lost {attempts} times "
            f"(lease expired); giving up after {max_attempts} attempts"
        )
        values |= {"status": RunStatus.FAILED.value, "error": self._ctx.cipher.seal_text(error)}
        events: list[Event] = [("failed", {"error": error})]
        return self.move(
            s, run_id, guard, values, events=events, notify="run.failed" if notify else None
        )

    def touch_queued(self, run_ids: Sequence[str]) -> None:
        """Restart the "queued too long" clock of runs whose wake-up was just re-sent."""
        rids = [r for r in (parse_run_id(i) for i in run_ids) if r is not None]
        with self._ctx.conns.one() as s:
            s.execute(
                update(RUNS)
                .where(RUNS.c.id.in_(rids), RUNS.c.status == RunStatus.QUEUED.value)
                .values(updated_at=self._ctx.now())
            )
