"""Standing grants: an approver's approval that stands for a time (issue 31)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 05:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("scope", sa.String(length=10), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.Column("arguments_sha256", sa.String(length=64), nullable=True),
        sa.Column("arguments", sa.JSON(), nullable=True),
        sa.Column("granted_by", sa.String(length=200), nullable=False),
        sa.Column("auth", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("source", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_grants_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_grants")),
    )  # fmt: skip
    op.create_index(
        "ix_grants_call", "grants", ["arguments_sha256"],
        postgresql_where=sa.text("revoked_at IS NULL"), sqlite_where=sa.text("revoked_at IS NULL"),
    )  # fmt: skip
    op.create_index("ix_grants_run", "grants", ["run_id", "tool"])
    op.create_index("ix_grants_created", "grants", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_grants_created", table_name="grants")
    op.drop_index("ix_grants_run", table_name="grants")
    op.drop_index("ix_grants_call", table_name="grants")
    op.drop_table("grants")
