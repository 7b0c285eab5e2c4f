"""The outbox: outbound notifications written with the transition that causes them

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03 17:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "outbox",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(length=40), nullable=False),
        sa.Column("webhook_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_outbox_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
        sa.UniqueConstraint("webhook_id", name=op.f("uq_outbox_webhook_id")),
    )  # fmt: skip
    due = sa.text("due_at IS NOT NULL")
    op.create_index("ix_outbox_due", "outbox", ["due_at"], postgresql_where=due, sqlite_where=due)


def downgrade() -> None:
    op.drop_index("ix_outbox_due", table_name="outbox")
    op.drop_table("outbox")
