"""MCP tools: each tool's pinned definition and fingerprint, and the fingerprint each
suspended MCP call was reviewed under

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-08 06:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_pins",
        sa.Column("server", sa.String(length=40), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("pinned_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("server", "tool", name=op.f("pk_mcp_pins")),
    )
    op.create_table(
        "mcp_reviews",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("call_id", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=250), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_mcp_reviews_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "call_id", name=op.f("pk_mcp_reviews")),
    )  # fmt: skip


def downgrade() -> None:
    op.drop_table("mcp_reviews")
    op.drop_table("mcp_pins")
