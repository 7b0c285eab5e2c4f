"""Signed approval webhooks' ids, each approval client's own, kept apart from the
approvals they made (a replaced or withdrawn approval's id still answers as a replay)

Ids used before this revision are not carried over: a resend older than the
signature's timestamp tolerance (5 minutes) is refused before its id is looked up.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 20:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_receipts",
        sa.Column("client", sa.String(length=200), nullable=False),
        sa.Column("webhook_id", sa.String(length=255), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("turn_digest", sa.String(length=64), nullable=False),
        sa.Column("request", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_webhook_receipts_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("client", "webhook_id", name=op.f("pk_webhook_receipts")),
    )  # fmt: skip
    op.create_index("ix_webhook_receipts_run_id", "webhook_receipts", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_receipts_run_id", table_name="webhook_receipts")
    op.drop_table("webhook_receipts")
