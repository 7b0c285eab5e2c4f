"""The tables and the statements built from them, shared by the store's parts. The hot
ones take bind parameters and are built once per shape (see ``Connections.statement``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Column,
    ColumnElement,
    Select,
    Table,
    and_,
    bindparam,
    case,
    insert,
    literal,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.sql.dml import Insert, ReturningUpdate, Update
from sqlalchemy.sql.selectable import CTE, FromClause, ScalarSelect

from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import CallRecord, CallStatus, RunStatus
from airlock.persistence.models import (
    AgentRun,
    ApprovalRow,
    BeatJobRow,
    DecisionRow,
    GrantRow,
    InboxSessionRow,
    OutboxRow,
    RunEventRow,
    SignInFailureRow,
    ToolCallRow,
    WebhookReceiptRow,
)
from airlock.persistence.models_gateway import McpGatewayCallRow
from airlock.persistence.models_mcp import McpPinRow, McpReviewRow
from airlock.persistence.models_tallies import RunTallyRow
from airlock.persistence.store.common import Event

RUNS = cast(Table, AgentRun.__table__)
DECISIONS = cast(Table, DecisionRow.__table__)
EVENTS = cast(Table, RunEventRow.__table__)
CALLS = cast(Table, ToolCallRow.__table__)
OUTBOX = cast(Table, OutboxRow.__table__)
APPROVALS = cast(Table, ApprovalRow.__table__)
RECEIPTS = cast(Table, WebhookReceiptRow.__table__)
SESSIONS = cast(Table, InboxSessionRow.__table__)
FAILURES = cast(Table, SignInFailureRow.__table__)
BEAT_JOBS = cast(Table, BeatJobRow.__table__)
GRANTS = cast(Table, GrantRow.__table__)
TALLIES = cast(Table, RunTallyRow.__table__)
MCP_PINS = cast(Table, McpPinRow.__table__)
MCP_REVIEWS = cast(Table, McpReviewRow.__table__)
MCP_GATEWAY_CALLS = cast(Table, McpGatewayCallRow.__table__)


def new_notification(run_id: uuid.UUID | None, event_type: str, now: datetime) -> dict[str, Any]:
    """The outbox row of a notification caused now: due at once, under a webhook-id of
    its own that every attempt to deliver it repeats (receivers deduplicate on it)."""
    return {
        "run_id": run_id,
        "event_type": event_type,
        "webhook_id": f"msg_{uuid.uuid4().hex}",
        "created_at": now,
        "due_at": now,
        "attempts": 0,
    }


RUN_COLUMNS = [c for c in RUNS.c if c.name != "suspended_state"]
HAS_CHECKPOINT = RUNS.c.suspended_state.is_not(None).label("has_checkpoint")


# A waiting run's checkpoint comes with the row: whoever reads a waiting run
# (the run view, a decision) needs its pending turn, and this spares a query.
WAITING_CHECKPOINT = case(
    (RUNS.c.status == RunStatus.WAITING_FOR_APPROVAL.value, RUNS.c.suspended_state), else_=None
).label("checkpoint")


def status_in(*statuses: str) -> ColumnElement[bool]:
    """The guard of a transition of one run, found by its id: ``status IN (…)`` with
    '' (never a status) among the values, spelt as ORs (no list to expand per call),
    so that PostgreSQL cannot prove from it the predicate of a partial index by status.
    From ``status = 'queued'`` it can, and then, before it has statistics of a new
    table, it was seen to prefer that index, small as it looked, and filter it by id:
    every claim read every queued run's entry, and the dead entries of the runs that
    had been queued, so a backlog made each claim dearer."""
    return or_(*(RUNS.c.status == status for status in (*statuses, "")))


def claim_statement(claimable: ColumnElement[bool]) -> ReturningUpdate[Any]:
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
            _decision_of_turn(DECISIONS.c.decision),
            _decision_of_turn(DECISIONS.c.approver),
            RUNS.c.trace_context,
        )
    )


def _decision_of_turn(column: Column[Any]) -> ScalarSelect[Any]:
    """``column`` of the decision for the turn the run waited on (none if it did not):
    a resume's claim reads its decision with the run, in its one round trip."""
    return (
        select(column)
        .where(
            DECISIONS.c.run_id == bindparam("rid"), DECISIONS.c.turn_digest == RUNS.c.turn_digest
        )
        .scalar_subquery()
    )


CLAIM = claim_statement(status_in(RunStatus.QUEUED.value))
TAKE_OVER = claim_statement(
    or_(
        RUNS.c.status == RunStatus.QUEUED.value,
        and_(
            RUNS.c.status == RunStatus.RUNNING.value,
            RUNS.c.lease_owner == bindparam("previous"),
        ),
    )
)


def reserving(build: Callable[[], Update], k: int) -> ReturningUpdate[Any, Any]:
    """The UPDATE ``build`` makes, raising the run's event sequence by ``k`` and
    returning the run's id and the raised sequence."""
    bumped = build().values(event_seq=RUNS.c.event_seq + k)
    return bumped.returning(RUNS.c.id, RUNS.c.event_seq)


EVENT_COLUMNS = ["run_id", "seq", "kind", "payload", "created_at"]


def insert_events(
    moved: CTE,
    k: int,
    source: FromClause | None = None,
    *,
    calls: int = 0,
    notify: bool = False,
) -> Insert:
    """INSERT ``k`` events (bound as ``event_params`` names them) under the sequence
    numbers ``moved`` (a CTE of one run's UPDATE returning ``id`` and the raised
    ``event_seq``) reserved for them; and with them ``calls`` ledger records (bound as
    ``call_params`` names them), in a CTE of their own; and ``notify``, an outbox row
    (bound as ``notify_params`` names it), in another."""
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
    statement = insert(EVENTS).from_select(EVENT_COLUMNS, rows[0] if k == 1 else union_all(*rows))
    if calls:
        statement = statement.add_cte(record_calls(moved, calls))
    if notify:
        statement = statement.add_cte(record_notification(moved))
    return statement


def record_start(moved: CTE) -> CTE:
    """INSERT the ``started`` record of a call (bound as ``s_<column>``) of the run
    ``moved`` updated: with the events written before the call, in their statement."""
    columns = list(START_COLUMNS)
    source = select(
        moved.c.id, *(bindparam(f"s_{c}", type_=CALLS.c[c].type) for c in columns)
    ).select_from(moved)
    return insert(CALLS).from_select(["run_id", *columns], source).cte("started")


def record_notification(moved: CTE) -> CTE:
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


def notify_params(event_type: str, now: datetime) -> dict[str, Any]:
    row = new_notification(None, event_type, now)
    return {"o_type": row["event_type"], "o_webhook_id": row["webhook_id"]}


def start_call(*, guarded: bool) -> Insert:
    """A call's ``started`` record (bound as ``s_<column>``); ``guarded``: only while the
    run is running under the lease ``owner``, its row held for the statement."""
    columns = ["run_id", *START_COLUMNS]
    source = select(*(bindparam(f"s_{c}", type_=CALLS.c[c].type) for c in columns))
    if guarded:
        leased = (
            select(RUNS.c.id)
            .where(
                RUNS.c.id == bindparam("s_run_id"),
                status_in(RunStatus.RUNNING.value),
                RUNS.c.lease_owner == bindparam("owner"),
            )
            .with_for_update(read=True)
        )
        source = source.where(leased.exists())
    return insert(CALLS).from_select(columns, source).returning(CALLS.c.id)


def finish_call() -> Update:
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


CALL_KEY = ["run_id", "call_id"]
CALL_COLUMNS = (
    "call_id", "tool", "effect", "arguments", "status", "result", "is_error", "attempts",
    "started_at", "finished_at",
)  # fmt: skip
START_COLUMNS = (*CALL_COLUMNS[:-1], "started_by")
"""A call's ``started`` record: not finished, and by whom."""


def record_calls(moved: CTE, m: int) -> CTE:
    """INSERT ``m`` ledger records for the run ``moved`` updated; a call already
    recorded (by a duplicate of the segment) keeps its first record."""
    rows = [
        select(
            moved.c.id,
            *(bindparam(f"c{j}_{c}", type_=CALLS.c[c].type) for c in CALL_COLUMNS),
        ).select_from(moved)
        for j in range(m)
    ]
    recorded = (
        pg_insert(CALLS)
        .from_select(["run_id", *CALL_COLUMNS], rows[0] if m == 1 else union_all(*rows))
        .on_conflict_do_nothing(index_elements=CALL_KEY)
    )
    return recorded.cte("recorded")


def call_row(call: CallRecord, cipher: StateCipher) -> dict[str, Any]:
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


def call_params(calls: Sequence[CallRecord], cipher: StateCipher) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for j, call in enumerate(calls):
        params |= {f"c{j}_{c}": v for c, v in call_row(call, cipher).items()}
    return params


def create_statement(columns: Sequence[str]) -> Insert:
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
    return insert(EVENTS).from_select(EVENT_COLUMNS, source)


DECISION_COLUMNS = (
    "run_id", "turn_digest", "decision", "approver", "webhook_id", "created_at", "identity",
)  # fmt: skip


def decide_statement(k: int, moving: Callable[[], Update]) -> Insert:
    """PostgreSQL: the guarded UPDATE feeds the decision's INSERT, and both feed the
    ``k`` events' INSERT, in one round trip; a second decision for the turn violates
    the unique key and rolls all of it back. Its row count tells whether it won."""
    cte = reserving(moving, k).cte("moved")
    columns = [c for c in DECISION_COLUMNS if c != "run_id"]
    source = select(cte.c.id, *(bindparam(f"d_{c}", type_=DECISIONS.c[c].type) for c in columns))
    decided = insert(DECISIONS).from_select(["run_id", *columns], source)
    if not k:
        return decided
    both = decided.returning(DECISIONS.c.run_id).cte("decided")
    return insert_events(cte, k, cte.join(both, both.c.run_id == cte.c.id))


def waiting_guard(*, expiry: bool) -> ColumnElement[bool]:
    """The decision's guard: the run waits on this turn, and its approval has not
    expired (``expiry``: has, for the expiry's own decision) as of the statement."""
    if expiry:
        live = RUNS.c.expires_at <= bindparam("now")
    else:
        live = or_(RUNS.c.expires_at.is_(None), RUNS.c.expires_at > bindparam("now"))
    return and_(
        RUNS.c.id == bindparam("rid"),
        status_in(RunStatus.WAITING_FOR_APPROVAL.value),
        RUNS.c.turn_digest == bindparam("digest"),
        live,
    )


def waiting_to_queued(*, expiry: bool = False) -> Update:
    """waiting → queued, under ``waiting_guard``."""
    return (
        update(RUNS)
        .where(waiting_guard(expiry=expiry))
        .values(
            status=RunStatus.QUEUED.value,
            expires_at=None,
            updated_at=bindparam("now"),
            version=RUNS.c.version + 1,
        )
    )


def event_params(events: Sequence[Event], now: datetime, cipher: StateCipher) -> dict[str, Any]:
    params: dict[str, Any] = {"event_at": now}
    for i, (kind, payload) in enumerate(events):
        params |= {f"kind_{i}": kind, f"payload_{i}": cipher.seal_json(payload)}
    return params


def row_of(s: Connection, table: Table, run_id: str, **key: Any) -> RowMapping | None:
    """The row of ``table`` that belongs to the run and has ``key`` (unique per run)."""
    where = [table.c.run_id == uuid.UUID(run_id), *(table.c[c] == v for c, v in key.items())]
    return s.execute(select(table).where(*where)).mappings().first()


def run_select() -> Select[Any]:
    return select(*RUN_COLUMNS, HAS_CHECKPOINT, WAITING_CHECKPOINT)


RUN_BY_ID = run_select().where(RUNS.c.id == bindparam("rid"))
"""One run by its id: built once, as every poll of a run's view reads it."""
