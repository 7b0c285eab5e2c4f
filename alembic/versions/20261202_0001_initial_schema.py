"""Initial schema: agent_runs, run_events, tool_calls, decisions

Revision ID: 0001
Revises:
Create Date: 2026-12-02 18:33:11.169205
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# BIGINT autoincrement on PostgreSQL; SQLite autoincrements only INTEGER PRIMARY KEY.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# Partial indexes: a run is in one only while it has that status.
PARTIAL_INDEXES = [
    ("ix_agent_runs_queued", "updated_at", "status = 'queued'"),
    ("ix_agent_runs_waiting", "expires_at", "status = 'waiting_for_approval'"),
    ("ix_agent_runs_leases", "lease_expires_at", "status = 'running'"),
    ("ix_agent_runs_finished", "updated_at", "status IN ('completed', 'failed', 'cancelled')"),
]

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("termination", sa.String(length=32), nullable=True),
        sa.Column("input", sa.Text(), nullable=False),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("iterations", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("suspended_state", sa.Text(), nullable=True),
        sa.Column("turn_digest", sa.String(length=64), nullable=True),
        sa.Column("suspended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_runs")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_agent_runs_idempotency_key")),
    )
    for name, column, where in PARTIAL_INDEXES:
        condition = sa.text(where)
        op.create_index(
            name, "agent_runs", [column], postgresql_where=condition, sqlite_where=condition
        )
    op.create_index("ix_agent_runs_created_at_id", "agent_runs", ["created_at", "id"])
    op.create_index(
        "ix_agent_runs_agent_created_at_id", "agent_runs", ["agent", "created_at", "id"]
    )

    op.create_table(
        "decisions",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("turn_digest", sa.String(length=64), nullable=False),
        sa.Column("decision", sa.JSON(), nullable=False),
        sa.Column("approver", sa.String(length=200), nullable=True),
        sa.Column("webhook_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["agent_runs.id"],
            name=op.f("fk_decisions_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
        sa.UniqueConstraint("run_id", "turn_digest", name=op.f("uq_decisions_run_id_turn_digest")),
        sa.UniqueConstraint("webhook_id", name=op.f("uq_decisions_webhook_id")),
    )
    op.create_table(
        "run_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["agent_runs.id"],
            name=op.f("fk_run_events_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_events")),
        sa.UniqueConstraint("run_id", "seq", name=op.f("uq_run_events_run_id_seq")),
    )
    op.create_table(
        "tool_calls",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("effect", sa.String(length=32), nullable=False),
        sa.Column("arguments", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("is_error", sa.Boolean(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["agent_runs.id"],
            name=op.f("fk_tool_calls_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_calls")),
        sa.UniqueConstraint("run_id", "call_id", name=op.f("uq_tool_calls_run_id_call_id")),
    )


def downgrade() -> None:
    op.drop_table("tool_calls")
    op.drop_table("run_events")
    op.drop_table("decisions")
    for name in [*(n for n, _, _ in PARTIAL_INDEXES), "ix_agent_runs_created_at_id"]:
        op.drop_index(name, table_name="agent_runs")
    op.drop_index("ix_agent_runs_agent_created_at_id", table_name="agent_runs")
    op.drop_table("agent_runs")
