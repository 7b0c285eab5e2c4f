"""Idempotency keys scoped to their caller: a ``caller`` column, and the key unique per
caller instead of across all callers

Runs made before have no caller: their keys stay as they were, and a create that
repeats one of them (from any caller) makes a new run.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # on SQLite a batch copies the table (env.py keeps its children's rows)
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("caller", sa.Text(), nullable=True))
        batch.drop_constraint("uq_agent_runs_idempotency_key", type_="unique")
        batch.create_unique_constraint(
            "uq_agent_runs_caller_idempotency_key", ["caller", "idempotency_key"]
        )


def downgrade() -> None:
    # a key two callers share is kept by its oldest run alone
    op.execute(
        "UPDATE agent_runs SET idempotency_key = NULL WHERE idempotency_key IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM agent_runs AS o "
        "WHERE o.idempotency_key = agent_runs.idempotency_key "
        "AND (o.created_at < agent_runs.created_at "
        "OR (o.created_at = agent_runs.created_at AND o.id < agent_runs.id)))"
    )
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_constraint("uq_agent_runs_caller_idempotency_key", type_="unique")
        batch.drop_column("caller")
        batch.create_unique_constraint("uq_agent_runs_idempotency_key", ["idempotency_key"])
