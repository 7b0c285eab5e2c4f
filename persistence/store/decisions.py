"""Decisions: one per suspended turn, recorded with the run's move waiting → queued."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue
from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from airlock.persistence.domain import ApprovalRecord, DecisionOutcome, DecisionRecord, RunStatus
from airlock.persistence.store import sql
from airlock.persistence.store.common import Event, parse_run_id
from airlock.persistence.store.context import Context
from airlock.persistence.store.decision_statements import (
    APPROVERS,
    LOCK_WAITING,
    REPLACE_MINE,
    SAME_PROPOSAL,
    SIGNED_OUT,
    USED_ELSEWHERE,
    USED_FOR_ANOTHER,
    approval_noted,
    proposal_of,
    signed_in,
    to_decision,
)
from airlock.persistence.store.dialects import Writes
from airlock.persistence.store.retry import retried

RUNS, DECISIONS, APPROVALS, RECEIPTS = sql.RUNS, sql.DECISIONS, sql.APPROVALS, sql.RECEIPTS
SESSIONS = sql.SESSIONS


@dataclass(frozen=True, slots=True)
class Receipt:
    """A signed webhook, as its receipt is kept: each approval client's ids are its own,
    and a resend must ask for what the first asked for."""

    client: str
    webhook_id: str
    request: str
    """A digest of what it asked for (the turn and the decision, or the withdrawal)."""


Audit = Callable[[tuple[str, ...], bool, bool], Sequence[Event]]
"""The events a principal's approval writes, given the principals that approved the
same effect so far (this one last), whether that reached the quorum, and whether it
replaced an approval of another effect by the same principal."""


class _NotWaitingError(Exception):
    """Internal: roll the decision back, the run was not waiting for this turn."""


class _NoApprovalError(Exception):
    """Internal: roll the withdrawal back, the principal has no approval to withdraw."""


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
        identity: str | None = None,
        receipt: Receipt | None = None,
        sign_in: str | None = None,
        events: Sequence[Event] = (),
        expiry: bool = False,
        grants: Sequence[dict[str, Any]] = (),
    ) -> DecisionOutcome:
        """One transaction: the decision row (unique per turn), waiting → queued, and
        ``events`` (the audit record of the decision), and the ``receipt`` of the
        webhook that sent it. ``sign_in``: the inbox sign-in (its stored id) the decision
        is made under, which must still be open; it is held (``FOR SHARE``) until the
        commit, so a sign-out waits for the decision or the decision sees it. ``expiry``:
        the expiry's own decision, which needs the approval expired where every other
        needs it live. ``grants``: rows of the standing grants the decision gives
        (``Grants.row``), inserted only when it is recorded.

        Exactly one concurrent caller records; the others learn whether theirs
        was the same decision (``duplicate``) or another (``conflict``).
        """
        rid = parse_run_id(run_id)
        if rid is None:
            return DecisionOutcome("not_found")
        now = self._ctx.now()
        record = DecisionRecord(run_id, turn_digest, decision, approver, None, now, identity)
        row = self._row(record)
        params = {"rid": rid, "digest": turn_digest, "now": now}
        try:
            # one statement (autocommit on PostgreSQL), or a transaction of a few
            several = receipt is not None or sign_in is not None or bool(grants)
            with self._ctx.conns.tx() if several else self._ctx.conns.one() as s:
                if not signed_in(s, sign_in, now):
                    return SIGNED_OUT
                self._keep(s, receipt, params)
                if not self._ctx.sql.decide(s, params, row, events, expiry=expiry):
                    raise _NotWaitingError
                if grants:
                    s.execute(sql.GRANTS.insert(), list(grants))
        except (IntegrityError, _NotWaitingError):
            return self.explain(run_id, turn_digest, decision, receipt)
        return DecisionOutcome("recorded", record)

    def approve(
        self,
        run_id: str,
        turn_digest: str,
        decision: dict[str, JsonValue],
        *,
        effect: dict[str, JsonValue],
        principal: str,
        identity: str,
        auth: dict[str, JsonValue],
        quorum: int,
        audit: Audit,
        receipt: Receipt | None = None,
        sign_in: str | None = None,
    ) -> DecisionOutcome:
        """Record ``principal``'s approval of ``decision`` for the turn that waits; the
        approval that makes ``quorum`` distinct identities of the same ``effect`` (what
        the decision does to each call it covers, whatever its wording) also records the
        decision and moves the run waiting → queued, in its transaction; one of another
        effect by the same ``identity`` replaces theirs. The transaction locks the run's
        row first (``FOR UPDATE``; SQLite: ``BEGIN IMMEDIATE``): one reaches the quorum.
        A repeat, a webhook id used before, or a turn no longer waiting rolls it all back
        (explained as ``record_decision``'s are)."""
        rid = parse_run_id(run_id)
        if rid is None:
            return DecisionOutcome("not_found")
        now = self._ctx.now()
        record = DecisionRecord(run_id, turn_digest, decision, principal, None, now, identity)
        proposal, params = proposal_of(run_id, turn_digest, effect), {"rid": rid, "now": now}
        params["digest"] = turn_digest
        mine = params | {"identity": identity, "proposal": proposal}
        try:
            with self._ctx.conns.tx() as s:
                if s.execute(LOCK_WAITING, params).first() is None:
                    raise _NotWaitingError
                if not signed_in(s, sign_in, record.created_at):
                    return SIGNED_OUT
                self._keep(s, receipt, params)
                replaced = s.execute(REPLACE_MINE, mine).rowcount > 0
                s.execute(APPROVALS.insert(), self._approval_row(record, auth, proposal))
                approved_by = tuple(s.scalars(SAME_PROPOSAL, params | {"proposal": proposal}))
                reached = len(approved_by) >= quorum
                self._tally(s, record, params, audit(approved_by, reached, replaced), reached)
        except (IntegrityError, _NotWaitingError):
            return self.explain(
                run_id, turn_digest, decision, receipt, identity=identity, proposal=proposal
            )
        if not reached:  # the quorum is not: this approval waits for more
            return DecisionOutcome("partial", approved_by=approved_by)
        return DecisionOutcome("recorded", record, approved_by=approved_by)

    def _approval_row(
        self, record: DecisionRecord, auth: dict[str, JsonValue], proposal: str
    ) -> dict[str, Any]:
        return {
            "run_id": parse_run_id(record.run_id),
            "turn_digest": record.turn_digest,
            "principal": record.approver,
            "identity": record.identity,
            "auth": auth,
            "decision": self._ctx.cipher.seal_json(record.decision),
            "proposal": proposal,
            "webhook_id": None,  # kept as a receipt: see ``_keep``
            "created_at": record.created_at,
        }

    def _tally(
        self,
        s: Connection,
        record: DecisionRecord,
        params: dict[str, Any],
        events: Sequence[Event],
        reached: bool,
    ) -> None:
        """An approval's events: with the decision, when it reached the quorum, else
        alone; rolled back when the run no longer waits on the turn."""
        if reached:
            if not self._ctx.sql.decide(s, params, self._row(record), events, expiry=False):
                raise _NotWaitingError
        elif not self._ctx.sql.with_events(s, "approval", approval_noted, params, Writes(events)):
            raise _NotWaitingError

    def withdraw(
        self,
        run_id: str,
        turn_digest: str,
        principal: str,
        events: Sequence[Event],
        *,
        identity: str,
        receipt: Receipt | None = None,
    ) -> DecisionOutcome:
        """Withdraw the approval of ``identity`` (named ``principal``) of the turn that
        waits, with ``events`` (and the ``receipt`` of the webhook that asked), in one
        transaction under the run's lock (so it is counted by no approval after it):
        ``withdrawn`` with the approvals left; ``conflict`` when it has none or the turn
        no longer waits (a quorum reached is final); a resend of the webhook is a
        ``duplicate``."""
        rid = parse_run_id(run_id)
        if rid is None:
            return DecisionOutcome("not_found")
        params = {"rid": rid, "digest": turn_digest, "now": self._ctx.now()}
        try:
            with self._ctx.conns.tx() as s:
                if s.execute(LOCK_WAITING, params).first() is None:
                    raise _NotWaitingError
                self._keep(s, receipt, params)
                mine = params | {"identity": identity, "proposal": ""}
                if not s.execute(REPLACE_MINE, mine).rowcount:
                    raise _NoApprovalError
                noted = self._ctx.sql.with_events(
                    s, "approval", approval_noted, params, Writes(events)
                )
                assert noted, "the run's row is locked and checked"
                left = tuple(s.scalars(APPROVERS, params))
        except _NoApprovalError:
            why = f"{principal} has no approval of this turn to withdraw"
            return DecisionOutcome("conflict", None, why)
        except (IntegrityError, _NotWaitingError):
            with self._ctx.conns.one() as s:
                replay = self._replay(s, run_id, receipt) if receipt else None
                return replay or self._why_not_waiting(s, run_id, turn_digest)
        return DecisionOutcome("withdrawn", approved_by=left)

    def _row(self, record: DecisionRecord) -> dict[str, Any]:
        """The ``decisions`` row of ``record``, its decision sealed."""
        return {
            "run_id": parse_run_id(record.run_id),
            "turn_digest": record.turn_digest,
            "decision": self._ctx.cipher.seal_json(record.decision),
            "approver": record.approver,
            "webhook_id": record.webhook_id,  # None: kept as a receipt (``_keep``)
            "created_at": record.created_at,
            "identity": record.identity,
        }

    def approvals(self, run_id: str, turn_digest: str) -> list[ApprovalRecord]:
        """The approvals recorded for a turn, oldest first."""
        rid = parse_run_id(run_id)
        if rid is None:
            return []
        with self._ctx.conns.one() as s:
            rows = s.execute(
                select(APPROVALS)
                .where(APPROVALS.c.run_id == rid, APPROVALS.c.turn_digest == turn_digest)
                .order_by(APPROVALS.c.id)
            ).mappings()
            return [self._approval(row) for row in rows]

    def _approval(self, row: Mapping[Any, Any]) -> ApprovalRecord:
        return ApprovalRecord(
            run_id=str(row["run_id"]),
            turn_digest=row["turn_digest"],
            principal=row["principal"],
            auth=dict(row["auth"]),
            decision=self._ctx.cipher.open_json(row["decision"], "an approval"),
            proposal=row["proposal"],
            webhook_id=row["webhook_id"],
            created_at=row["created_at"],
            identity=row["identity"],
        )

    def explain(
        self,
        run_id: str,
        turn_digest: str,
        decision: dict[str, JsonValue],
        receipt: Receipt | None,
        *,
        identity: str | None = None,
        proposal: str | None = None,
    ) -> DecisionOutcome:
        """Why ``decision`` is not recorded for the turn, read only: a replay of its
        webhook id, the same decision already made (``duplicate``), the same approval
        (``proposal``) by ``identity`` already counted, or a ``conflict`` saying why."""
        with self._ctx.conns.one() as s:
            if receipt is not None:
                replay = self._replay(s, run_id, receipt)
                if replay is not None:
                    return replay
            stored = self._decision(s, run_id, turn_digest)
            if stored is not None:
                if stored.decision == decision or self._decided_by(s, stored, proposal):
                    return DecisionOutcome("duplicate", stored)
                return DecisionOutcome(
                    "conflict", stored, "another decision for this turn was already recorded"
                )
            if identity is not None and proposal is not None:
                mine = sql.row_of(s, APPROVALS, run_id, turn_digest=turn_digest, identity=identity)
                if mine is not None and mine["proposal"] == proposal:
                    same = {"rid": mine["run_id"], "digest": turn_digest, "proposal": proposal}
                    approved_by = tuple(s.scalars(SAME_PROPOSAL, same))
                    return DecisionOutcome("duplicate", approved_by=approved_by)
            return self._why_not_waiting(s, run_id, turn_digest)

    def _decided_by(self, s: Connection, stored: DecisionRecord, proposal: str | None) -> bool:
        """Whether the quorum that made ``stored`` approved the effect ``proposal``."""
        if proposal is None or stored.approver is None:
            return False
        who = (
            {"identity": stored.identity}
            if stored.identity is not None
            else {"principal": stored.approver}  # a decision made before identities were kept
        )
        won = sql.row_of(s, APPROVALS, stored.run_id, turn_digest=stored.turn_digest, **who)
        return won is not None and won["proposal"] == proposal

    def _keep(self, s: Connection, receipt: Receipt | None, params: dict[str, Any]) -> None:
        """Keep the webhook's receipt with the turn, in the write's transaction: a
        second use of its id by the same client violates the key and rolls it back."""
        if receipt is None:
            return
        s.execute(
            RECEIPTS.insert(),
            {
                "client": receipt.client,
                "webhook_id": receipt.webhook_id,
                "request": receipt.request,
                "run_id": params["rid"],
                "turn_digest": params["digest"],
                "created_at": params["now"],
            },
        )

    def _replay(self, s: Connection, run_id: str, receipt: Receipt) -> DecisionOutcome | None:
        """A webhook its client sent before: answered with what its turn holds now (the
        decision, or the approvals so far), never applied again; the same id asking for
        something else is a conflict."""
        kept = s.execute(
            select(RECEIPTS.c.run_id, RECEIPTS.c.turn_digest, RECEIPTS.c.request).where(
                RECEIPTS.c.client == receipt.client, RECEIPTS.c.webhook_id == receipt.webhook_id
            )
        ).first()
        if kept is None:
            return None
        if str(kept.run_id) != run_id:
            return USED_ELSEWHERE
        if kept.request != receipt.request:
            return USED_FOR_ANOTHER
        stored = self._decision(s, run_id, kept.turn_digest)
        approvals = {"rid": kept.run_id, "digest": kept.turn_digest}
        approved_by = tuple(s.scalars(APPROVERS, approvals))
        return DecisionOutcome("duplicate", stored, approved_by=approved_by)

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

    @retried
    def decision_for(self, run_id: str, turn_digest: str) -> DecisionRecord | None:
        with self._ctx.conns.one() as s:
            return self._decision(s, run_id, turn_digest)
