"""Runs: their creation, and reading one back (its sealed columns opened)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from airlock.loop import StateError, SuspendedRunState, Usage
from airlock.persistence.crypto import SEALED_MARKS
from airlock.persistence.domain import Claim, Run, RunStatus
from airlock.persistence.store import sql
from airlock.persistence.store.common import Event, UnknownRunError, parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.retry import retried


class Runs:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def create(
        self,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
        first_event: Event | None = None,
        requested_by: str | None = None,
        caller: str = "api",
        trace_context: str | None = None,
    ) -> tuple[Run, bool]:
        """Insert a queued run, and with it its first event (kind, payload) as seq 1.
        With an idempotency key ``caller`` (by default a caller of the Python API)
        already used, return that run instead: a caller's key is unique, so of
        concurrent creates the insert that wins decides."""
        if idempotency_key is not None:
            existing = self.by_idempotency_key(caller, idempotency_key)
            if existing is not None:
                return existing, False
        values = self._new_row(agent, input, idempotency_key, metadata)
        values |= {"requested_by": requested_by, "caller": caller}
        if trace_context is not None:
            values["trace_context"] = trace_context
        if first_event is not None:
            values["event_seq"] = 1
        try:
            with self._ctx.conns.one() as s:
                self._ctx.sql.insert_run(s, values, first_event)
        except IntegrityError:
            if idempotency_key is None:
                raise
            existing = self.by_idempotency_key(caller, idempotency_key)
            if existing is None:
                raise
            return existing, False
        return self.opened(values | {"has_checkpoint": False}), True

    def _new_row(
        self,
        agent: str,
        input: str,
        idempotency_key: str | None,
        metadata: dict[str, JsonValue] | None,
    ) -> dict[str, Any]:
        now = self._ctx.now()
        unset = ("termination", "output", "error", "turn_digest", "suspended_at", "expires_at")
        return {
            "id": uuid.uuid4(),
            "agent": agent,
            "status": RunStatus.QUEUED.value,
            "input": self._ctx.cipher.seal_text(input),
            **dict.fromkeys(unset),
            "lease_owner": None,
            "lease_expires_at": None,
            **dict.fromkeys(("iterations", "prompt_tokens", "completion_tokens"), 0),
            "attempts": 0,
            "event_seq": 0,
            "idempotency_key": idempotency_key,
            "metadata": dict(metadata or {}),
            "created_at": now,
            "updated_at": now,
            "version": 1,
        }

    def trace(self, run_id: str, trace_context: str) -> None:
        """Keep the run's span context (with the segment the next one links to). Traces
        only: no status, lease or counter is read or written."""
        with self._ctx.conns.one() as s:
            s.execute(
                update(sql.RUNS)
                .where(sql.RUNS.c.id == parse_run_id(run_id))
                .values(trace_context=trace_context)
            )

    def by_idempotency_key(self, caller: str, key: str) -> Run | None:
        """The run ``caller`` made with ``key``."""
        with self._ctx.conns.one() as s:
            row = s.execute(
                sql.run_select().where(
                    sql.RUNS.c.caller == caller, sql.RUNS.c.idempotency_key == key
                )
            ).first()
            return self.opened(row._mapping) if row is not None else None

    @retried
    def get(self, run_id: str) -> Run | None:
        rid = parse_run_id(run_id)
        if rid is None:
            return None
        with self._ctx.conns.one() as s:
            row = self._ctx.sql.read(s, "run_by_id", lambda: sql.RUN_BY_ID, {"rid": rid})
            return self.opened(row) if row is not None else None

    def require(self, run_id: str) -> Run:
        run = self.get(run_id)
        if run is None:
            raise UnknownRunError(f"no run has id {run_id!r}")
        return run

    def opened(self, row: Mapping[Any, Any]) -> Run:
        """The run of ``row``, its sealed columns opened. One that cannot be opened (a
        key that was dropped) reads as empty, with ``unreadable`` saying why: it is
        this run's problem alone, and every other run reads on."""
        run = to_run(row)
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
                opened[name] = self._ctx.cipher.open_text(value, f"the run's {name}")
            except StateError as exc:
                opened[name] = "" if name == "input" else None
                opened["unreadable"] = str(exc)
        return dataclasses.replace(run, **opened)

    def load_state(self, run: Run | Claim) -> SuspendedRunState:
        """The run's checkpoint, decrypted and verified. Raises ``StateError``."""
        stored = run.checkpoint
        if stored is None:
            with self._ctx.conns.one() as s:
                stored = s.scalar(
                    select(sql.RUNS.c.suspended_state).where(sql.RUNS.c.id == parse_run_id(run.id))
                )
        if stored is None:
            raise StateError(f"run {run.id} has no checkpoint")
        state = SuspendedRunState.from_json(self._ctx.cipher.open(stored))
        if run.turn_digest is not None and state.turn_digest != run.turn_digest:
            raise StateError("suspended state was tampered with: its digest is not the run's")
        if state.run_id != run.id:
            raise StateError("suspended state was tampered with: it belongs to another run")
        return state


def to_run(row: Mapping[Any, Any]) -> Run:
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
        requested_by=row["requested_by"],
        caller=row.get("caller"),
        trace_context=row.get("trace_context"),
        checkpoint=row.get("checkpoint"),
    )
