"""The run's span context (a W3C traceparent) when traces are on: every segment, on any
worker after any park, and the wait for a person are spans of the run's one trace
(issue 45).

Revision ID: 0013
Revises: 0010
Create Date: 2026-12-08 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain ADD COLUMN: on SQLite a batch would rebuild agent_runs (and drop its triggers)
    op.add_column("agent_runs", sa.Column("trace_context", sa.String(512), nullable=True))


def downgrade() -> None:
    op.drop_column("agent_runs", "trace_context")
