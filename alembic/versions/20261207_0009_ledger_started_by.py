"""The ledger says which segment started a call: a segment whose database connection
dropped as it recorded the start tells its own record from an earlier segment's
(issue 42)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07 14:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tool_calls") as batch:
        batch.add_column(sa.Column("started_by", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tool_calls") as batch:
        batch.drop_column("started_by")
