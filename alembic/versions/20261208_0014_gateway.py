"""The MCP gateway's held calls: a principal's call of a tool with its arguments, the run
that holds it, open until its result was returned once

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-08 08:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_gateway_calls",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("open_key", sa.String(length=64), nullable=True),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.String(length=500), nullable=False),
        sa.Column("server", sa.String(length=40), nullable=False),
        sa.Column("tool", sa.String(length=250), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("returned_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["agent_runs.id"], name=op.f("fk_mcp_gateway_calls_run_id_agent_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_mcp_gateway_calls")),
        sa.UniqueConstraint("open_key", name=op.f("uq_mcp_gateway_calls_open_key")),
    )  # fmt: skip
    op.create_index("ix_mcp_gateway_calls_run_id", "mcp_gateway_calls", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_mcp_gateway_calls_run_id", table_name="mcp_gateway_calls")
    op.drop_table("mcp_gateway_calls")
