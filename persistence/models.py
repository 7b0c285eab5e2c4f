"""SQLAlchemy 2 typed models. Alembic migrations are the only way the schema changes."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both databases (SQLite keeps naive text, so store naive UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use aware UTC datetimes")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_MARK = "\x1bb64:"


def to_db_text(value: str) -> str:
    """Text as both databases store it: unchanged, unless it holds NUL (PostgreSQL's
    text refuses it) or a lone surrogate (not UTF-8), or starts with the mark; then the
    mark and the base64 of its UTF-8 (surrogates passed through). Lossless."""
    if "\x00" in value or value.startswith(_MARK):
        return _escaped(value)
    try:
        value.encode()
    except UnicodeEncodeError:
        return _escaped(value)
    return value


def _escaped(value: str) -> str:
    return _MARK + base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()


def from_db_text(value: str) -> str:
    if value.startswith(_MARK):
        return base64.b64decode(value[len(_MARK) :]).decode("utf-8", "surrogatepass")
    return value


class SafeText(TypeDecorator[str]):
    """``Text`` that takes any Python string (see ``to_db_text``)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else to_db_text(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else from_db_text(value)


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BIGINT autoincrement on PostgreSQL; SQLite only autoincrements INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def _partial(name: str, column: str, *, status: str) -> Index:
    where = text(f"status {'IN' if status.startswith('(') else '='} {status}")
    return Index(name, column, postgresql_where=where, sqlite_where=where)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
    }


class AgentRun(Base):
    __tablename__ = "agent_runs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid(), primary_key=True)
    agent: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(32))
    termination: Mapped[str | None] = mapped_column(String(32))
    input: Mapped[str] = mapped_column(SafeText)
    output: Mapped[str | None] = mapped_column(SafeText)
    error: Mapped[str | None] = mapped_column(SafeText)
    iterations: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    suspended_state: Mapped[str | None] = mapped_column(Text)
    turn_digest: Mapped[str | None] = mapped_column(String(64))
    suspended_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    event_seq: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    """Unique per caller: the same key from two callers is two runs."""
    caller: Mapped[str | None] = mapped_column(Text)
    """Who created the run, as its idempotency key is scoped (``oidc:<issuer>:<sub>``,
    ``token``, ``cli``, ``api``…); none for a run made before callers were recorded."""
    requested_by: Mapped[str | None] = mapped_column(String(200))
    """Who asked for the run (the API's principal, or the requester a trusted client
    names): by default they may not approve its calls."""
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    version: Mapped[int] = mapped_column(Integer, default=1)

    __table_args__ = (
        # Partial indexes: a row is in one only while it has that status, so a
        # transition touches few index entries and each index stays small.
        _partial("ix_agent_runs_queued", "updated_at", status="'queued'"),
        _partial("ix_agent_runs_waiting", "expires_at", status="'waiting_for_approval'"),
        _partial("ix_agent_runs_leases", "lease_expires_at", status="'running'"),
        _partial(
            "ix_agent_runs_finished", "updated_at", status="('completed', 'failed', 'cancelled')"
        ),
        # keyset listing, newest first, optionally by agent
        Index("ix_agent_runs_created_at_id", "created_at", "id"),
        Index("ix_agent_runs_agent_created_at_id", "agent", "created_at", "id"),
        UniqueConstraint("caller", "idempotency_key"),
    )


class RunEventRow(Base):
    __tablename__ = "run_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime]

    __table_args__ = (UniqueConstraint("run_id", "seq"),)


class ToolCallRow(Base):
    __tablename__ = "tool_calls"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    call_id: Mapped[str] = mapped_column(String(200))
    tool: Mapped[str] = mapped_column(String(200))
    effect: Mapped[str] = mapped_column(String(32))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    result: Mapped[str | None] = mapped_column(SafeText)
    is_error: Mapped[bool] = mapped_column(default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    started_by: Mapped[str | None] = mapped_column(String(200))
    """The lease owner of the segment that started the call (a call that acts)."""

    __table_args__ = (UniqueConstraint("run_id", "call_id"),)


class DecisionRow(Base):
    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    turn_digest: Mapped[str] = mapped_column(String(64))
    decision: Mapped[dict[str, Any]] = mapped_column(JSON)
    approver: Mapped[str | None] = mapped_column(String(200))
    webhook_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime]
    identity: Mapped[str | None] = mapped_column(String(600))
    """Who made it (``Principal.key``; ``approver`` is the name shown); none for a
    decision made before identities were kept."""

    __table_args__ = (UniqueConstraint("run_id", "turn_digest"),)


class WebhookReceiptRow(Base):
    """A signed approval webhook's id, as its approval client sent it, kept with the
    turn it was applied to: a resend of it is answered as a replay, even once the
    approval it made was replaced or withdrawn. Each client's ids are its own."""

    __tablename__ = "webhook_receipts"

    client: Mapped[str] = mapped_column(String(200), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    turn_digest: Mapped[str] = mapped_column(String(64))
    request: Mapped[str] = mapped_column(String(64))
    """A digest of what it asked for: a resend must ask for the same."""
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_webhook_receipts_run_id", "run_id"),)


class ApprovalRow(Base):
    """One principal's approval of a turn whose calls need a quorum: the turn is
    decided (a ``decisions`` row) when enough distinct principals approved the same
    decision (the same ``proposal``)."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    turn_digest: Mapped[str] = mapped_column(String(64))
    principal: Mapped[str] = mapped_column(String(200))
    auth: Mapped[dict[str, Any]] = mapped_column(JSON)
    """How the principal was authenticated (method, client, issuer, OS user) and the
    roles it acted with."""
    decision: Mapped[dict[str, Any]] = mapped_column(JSON)
    proposal: Mapped[str] = mapped_column(String(64))
    """A digest of the decision's effect (the calls it approves, with the arguments they
    run with): approvals count together when theirs are equal, whatever their wording."""
    webhook_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime]
    identity: Mapped[str] = mapped_column(String(600))
    """Who approved (``Principal.key``): one approval per identity and turn; ``principal``
    is the name shown."""

    __table_args__ = (UniqueConstraint("run_id", "turn_digest", "identity"),)


class OutboxRow(Base):
    """An outbound notification, written by the transition that causes it and delivered
    (and retried) by workers: a wake-up that is lost, or a worker that dies mid-delivery,
    leaves it due here, never lost."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("agent_runs.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(String(40))
    webhook_id: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    due_at: Mapped[datetime | None]
    """When a deliverer may take it next (a taker moves it on by its lease); none once
    it is settled (delivered, or given up after the last attempt)."""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    body: Mapped[str | None] = mapped_column(Text)
    """The event as first built (sealed when a key is set): every retry sends the same."""
    status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(SafeText)
    delivered_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_outbox_due", "due_at", postgresql_where=text("due_at IS NOT NULL"),
              sqlite_where=text("due_at IS NOT NULL")),
    )  # fmt: skip


class InboxSessionRow(Base):
    """A sign-in to the inbox, kept on the server: the cookie holds only a random token,
    and this row (found by a keyed hash of it) what the sign-in proved. Signing out
    deletes it, so a copied cookie ends with it."""

    __tablename__ = "inbox_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal: Mapped[dict[str, Any]] = mapped_column(JSON)
    csrf: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)


class SignInFailureRow(Base):
    """Failed inbox sign-ins of one client or one name (``key``, a hash of it) in the
    window that ends at ``window_ends``: past a few, sign-ins are refused until then."""

    __tablename__ = "sign_in_failures"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    window_ends: Mapped[datetime] = mapped_column(index=True)


class BeatJobRow(Base):
    """When each of beat's jobs last ran (the sweeper's makes its health visible)."""

    __tablename__ = "beat_jobs"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    last_run_at: Mapped[datetime]


class GrantRow(Base):
    """A standing grant: an approver's approval of a tool's calls that stands for a
    time, either of exactly the arguments it saw (``scope = 'call'``, any run of the
    agent) or of any arguments within one run (``scope = 'run'``). It releases a turn
    whose every asking call it covers, as its grantor's own approval would, until it
    expires or is revoked; the releasing transaction locks and re-checks it."""

    __tablename__ = "grants"

    id: Mapped[uuid.UUID] = mapped_column(Uuid(), primary_key=True)
    agent: Mapped[str] = mapped_column(String(200))
    tool: Mapped[str] = mapped_column(String(200))
    scope: Mapped[str] = mapped_column(String(10))
    run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("agent_runs.id", ondelete="CASCADE")
    )
    """The run a ``run`` grant stands in (none for a ``call`` grant)."""
    arguments_sha256: Mapped[str | None] = mapped_column(String(64))
    """A ``call`` grant's key: the digest of the agent, the tool and the arguments."""
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """The arguments approved (sealed when a key is set); none for a ``run`` grant."""
    granted_by: Mapped[str] = mapped_column(String(200))
    auth: Mapped[dict[str, Any]] = mapped_column(JSON)
    """How its grantor was authenticated and the roles it holds (``every_role`` for the
    operator): what a release authorises the covered call by."""
    reason: Mapped[str | None] = mapped_column(SafeText)
    source: Mapped[dict[str, Any]] = mapped_column(JSON)
    """The run, turn and call it was given on."""
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    revoked_by: Mapped[str | None] = mapped_column(String(200))
    uses: Mapped[int] = mapped_column(Integer, default=0)
    last_used_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_grants_call", "arguments_sha256", sqlite_where=text("revoked_at IS NULL"),
              postgresql_where=text("revoked_at IS NULL")),
        Index("ix_grants_run", "run_id", "tool"),
        Index("ix_grants_created", "created_at"),
    )  # fmt: skip


class McpPinRow(Base):
    """An MCP tool as it was reviewed: its definition (name, description, input schema,
    annotations) and that definition's fingerprint, recorded when the tool was first
    imported and replaced only by ``airlock mcp pin``. A call of the tool is executed
    only while the server lists it with this fingerprint."""

    __tablename__ = "mcp_pins"

    server: Mapped[str] = mapped_column(String(40), primary_key=True)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    pinned_at: Mapped[datetime]


class McpReviewRow(Base):
    """The fingerprint an MCP call was suspended (reviewed) under: the call runs after
    its approval only if the server still lists its tool with this fingerprint."""

    __tablename__ = "mcp_reviews"

    run_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("agent_runs.id", ondelete="CASCADE"), primary_key=True
    )
    call_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    tool: Mapped[str] = mapped_column(String(250))
    fingerprint: Mapped[str] = mapped_column(String(64))
