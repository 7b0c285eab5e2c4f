"""Principals: a run's requester, and one row per principal's approval of a turn
that needs a quorum

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 22:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("agent_runs", sa.Column("requested_by", sa.String(length=200), nullable=True))
    op.create_table(
        "approvals",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("turn_digest", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=200), nullable=False),
        sa.Column("auth", sa.JSON(), nullable=False),
        sa.Column("decision", sa.JSON(), nullable=False),
        sa.Column("proposal", sa.String(length=64), nullable=False),
        sa.Column("webhook_id", sa.String(length=255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_approvals_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
        sa.UniqueConstraint(
            "run_id", "turn_digest", "principal",
            name=op.f("uq_approvals_run_id_turn_digest_principal"),
        ),
        sa.UniqueConstraint("webhook_id", name=op.f("uq_approvals_webhook_id")),
    )  # fmt: skip


def downgrade() -> None:
    op.drop_table("approvals")
    # a plain ALTER TABLE … DROP COLUMN (SQLite 3.35+): batch mode would copy the
    # table and drop the old one, which cascades to every child row
    op.drop_column("agent_runs", "requested_by")
