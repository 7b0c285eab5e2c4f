"""The statements decisions and approvals are made of, and the outcomes they answer
with when they cannot be applied (``airlock.persistence.store.decisions`` uses them)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from airlock.loop.canonical import sha256_hex
from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import DecisionOutcome, DecisionRecord
from airlock.persistence.store import sql

RUNS, APPROVALS, SESSIONS = sql.RUNS, sql.APPROVALS, sql.SESSIONS


SIGNED_OUT = DecisionOutcome("conflict", None, "your sign-in has ended: sign in again")

OPEN_SIGN_IN = (
    select(SESSIONS.c.id)
    .where(SESSIONS.c.id == bindparam("sid"), SESSIONS.c.expires_at > bindparam("now"))
    .with_for_update(read=True)
)


def signed_in(s: Connection, sign_in: str | None, now: datetime) -> bool:
    """Whether the sign-in a decision is made under (if any) is still open; its row is
    held until the commit (SQLite's writers are one at a time already)."""
    if sign_in is None:
        return True
    return s.execute(OPEN_SIGN_IN, {"sid": sign_in, "now": now}).first() is not None


USED_ELSEWHERE = DecisionOutcome(
    "conflict", None, "this client already used this webhook-id for another run"
)

USED_FOR_ANOTHER = DecisionOutcome(
    "conflict", None, "this client already used this webhook-id for another request"
)

APPROVERS = (
    select(APPROVALS.c.principal)
    .where(APPROVALS.c.run_id == bindparam("rid"), APPROVALS.c.turn_digest == bindparam("digest"))
    .order_by(APPROVALS.c.id)
)

LOCK_WAITING = select(RUNS.c.id).where(sql.waiting_guard(expiry=False)).with_for_update()
"""The run's row, locked, while it waits on the turn with its approval live."""

REPLACE_MINE = APPROVALS.delete().where(
    APPROVALS.c.run_id == bindparam("rid"),
    APPROVALS.c.turn_digest == bindparam("digest"),
    APPROVALS.c.identity == bindparam("identity"),
    APPROVALS.c.proposal != bindparam("proposal"),
)
"""The principal's approval of the turn with another effect than ``proposal`` (with
'', every one: a withdrawal)."""

SAME_PROPOSAL = (
    select(APPROVALS.c.principal)
    .where(
        APPROVALS.c.run_id == bindparam("rid"),
        APPROVALS.c.turn_digest == bindparam("digest"),
        APPROVALS.c.proposal == bindparam("proposal"),
    )
    .order_by(APPROVALS.c.id)
)


def approval_noted() -> Any:
    """The UPDATE that numbers a partial approval's events: the run's row is locked
    and checked already."""
    return update(RUNS).where(RUNS.c.id == bindparam("rid")).values(updated_at=bindparam("now"))


def proposal_of(run_id: str, turn_digest: str, effect: dict[str, JsonValue]) -> str:
    """What approvals of the same effect share: a digest of it, bound to the run and
    turn (so equal edits on two runs do not show as equal)."""
    return sha256_hex({"run_id": run_id, "turn_digest": turn_digest, "effect": effect})


def to_decision(row: Mapping[Any, Any], cipher: StateCipher) -> DecisionRecord:
    return DecisionRecord(
        run_id=str(row["run_id"]),
        turn_digest=row["turn_digest"],
        decision=cipher.open_json(row["decision"], "a decision"),
        approver=row["approver"],
        webhook_id=row["webhook_id"],
        created_at=row["created_at"],
        identity=row.get("identity"),
    )
