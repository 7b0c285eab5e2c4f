"""Inbox sign-ins kept on the server (revocable, expiring), and failed sign-ins
counted per client and per name

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "inbox_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.JSON(), nullable=False),
        sa.Column("csrf", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inbox_sessions")),
    )
    op.create_index(
        op.f("ix_inbox_sessions_expires_at"), "inbox_sessions", ["expires_at"], unique=False
    )
    op.create_table(
        "sign_in_failures",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_ends", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_sign_in_failures")),
    )
    op.create_index(
        op.f("ix_sign_in_failures_window_ends"), "sign_in_failures", ["window_ends"], unique=False
    )


def downgrade() -> None:
    op.drop_table("sign_in_failures")
    op.drop_table("inbox_sessions")
