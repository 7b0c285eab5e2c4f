"""Decisions: one per suspended turn, recorded with the run's move waiting → queued."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import JsonValue
from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from persistence.crypto import StateCipher
from persistence.domain import DecisionOutcome, DecisionRecord, RunStatus
from persistence.store import sql
from persistence.store.common import Event, parse_run_id
from persistence.store.context import Context

RUNS, DECISIONS = sql.RUNS, sql.DECISIONS


class _NotWaitingError(Exception):
    """Internal: roll the decision back, the run was not waiting for this turn."""


class Decisions:
    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

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
        ``events`` (the audit record of the decision). ``expiry``: the expiry's own
        decision, which needs the approval expired where every other needs it live.

        Exactly one concurrent caller records; the others learn whether theirs
        was the same decision (``duplicate``) or another (``conflict``).
        """
        rid = parse_run_id(run_id)
        if rid is None:
            return DecisionOutcome("not_found")
        now = self._ctx.now()
        row: dict[str, Any] = {
            "run_id": rid,
            "turn_digest": turn_digest,
            "decision": self._ctx.cipher.seal_json(decision),
            "approver": approver,
            "webhook_id": webhook_id,
            "created_at": now,
        }
        params = {"rid": rid, "digest": turn_digest, "now": now}
        try:
            with self._ctx.conns.one() as s:
                if not self._ctx.sql.decide(s, params, row, events, expiry=expiry):
                    raise _NotWaitingError
        except (IntegrityError, _NotWaitingError):
            return self._explain_lost(run_id, turn_digest, decision, webhook_id)
        record = DecisionRecord(
            run_id=run_id,
            turn_digest=turn_digest,
            decision=decision,
            approver=approver,
            webhook_id=webhook_id,
            created_at=now,
        )
        return DecisionOutcome("recorded", record)

    def _explain_lost(
        self,
        run_id: str,
        turn_digest: str,
        decision: dict[str, JsonValue],
        webhook_id: str | None,
    ) -> DecisionOutcome:
        with self._ctx.conns.one() as s:
            if webhook_id is not None:
                replay = self._replay(s, run_id, webhook_id)
                if replay is not None:
                    return replay
            stored = self._decision(s, run_id, turn_digest)
            if stored is not None:
                if stored.decision == decision:
                    return DecisionOutcome("duplicate", stored)
                return DecisionOutcome(
                    "conflict", stored, "another decision for this turn was already recorded"
                )
            return self._why_not_waiting(s, run_id, turn_digest)

    def _replay(self, s: Connection, run_id: str, webhook_id: str) -> DecisionOutcome | None:
        replay = (
            s.execute(select(DECISIONS).where(DECISIONS.c.webhook_id == webhook_id))
            .mappings()
            .first()
        )
        if replay is None:
            return None
        if str(replay["run_id"]) == run_id:
            return DecisionOutcome("duplicate", to_decision(replay, self._ctx.cipher))
        return DecisionOutcome("conflict", None, "this webhook-id was already used for another run")

    def _why_not_waiting(self, s: Connection, run_id: str, turn_digest: str) -> DecisionOutcome:
        row = s.execute(
            select(RUNS.c.status, RUNS.c.turn_digest, RUNS.c.expires_at).where(
                RUNS.c.id == parse_run_id(run_id)
            )
        ).first()
        if row is None:
            return DecisionOutcome("not_found")
        if row.status != RunStatus.WAITING_FOR_APPROVAL.value:
            return DecisionOutcome("conflict", None, f"run is {row.status}, not waiting")
        if row.turn_digest != turn_digest:
            return DecisionOutcome(
                "conflict", None, "turn_digest is not the digest of the turn that waits"
            )
        if row.expires_at is not None and row.expires_at <= self._ctx.now():
            expired_at = row.expires_at.isoformat()
            return DecisionOutcome(
                "conflict", None, f"the approval expired at {expired_at}", expired=True
            )
        return DecisionOutcome("conflict", None, "the run changed meanwhile; read it again")

    def _decision(self, s: Connection, run_id: str, turn_digest: str) -> DecisionRecord | None:
        row = sql.row_of(s, DECISIONS, run_id, turn_digest=turn_digest)
        return to_decision(row, self._ctx.cipher) if row is not None else None

    def opened(self, stored: Mapping[str, Any]) -> dict[str, JsonValue]:
        """A decision as its row holds it (``Claim.decision``), opened. Raises
        ``StateError`` when its seal cannot be opened."""
        return self._ctx.cipher.open_json(stored, "a decision")

    def decision_for(self, run_id: str, turn_digest: str) -> DecisionRecord | None:
        with self._ctx.conns.one() as s:
            return self._decision(s, run_id, turn_digest)


def to_decision(row: Mapping[Any, Any], cipher: StateCipher) -> DecisionRecord:
    return DecisionRecord(
        run_id=str(row["run_id"]),
        turn_digest=row["turn_digest"],
        decision=cipher.open_json(row["decision"], "a decision"),
        approver=row["approver"],
        webhook_id=row["webhook_id"],
        created_at=row["created_at"],
    )
