"""When each of beat's jobs last ran (the sweeper's health, in /readyz and airlock stats)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05 06:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "beat_jobs",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_beat_jobs")),
    )


def downgrade() -> None:
    op.drop_table("beat_jobs")
