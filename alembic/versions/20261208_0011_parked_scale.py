"""Parked runs at scale (issue 46): what `airlock stats`, `/metrics` and the queue's
stream read costs what changed, not what waits.

- ``run_tallies``: runs per status (in slots, so that transitions of different runs
  seldom wait on one row), and per status a count of changes and the time of the
  latest, kept by triggers on ``agent_runs`` in the transaction of every write (every
  writer goes through them), and recounted here from the runs already stored;
- indexes that serve each listing: waiting runs by ``suspended_at`` (the oldest) and by
  ``(created_at, id)`` (the queue's pages), the outbox's due rows by ``(due_at, id)``
  (the claim's order) and its given-up rows;
- on PostgreSQL, a trigram index (``pg_trgm``) of the waiting runs' metadata text, so
  an inbox search (``?q=``) reads the rows that hold the text, not every waiting row.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WAITING = "status = 'waiting_for_approval'"
GIVEN_UP = "due_at IS NULL AND delivered_at IS NULL"

# The upsert of one tally row (PostgreSQL): rows are always taken in (status, slot)
# order, so two transitions never wait on each other's rows in a cycle.
_PG_UPSERT = """
    ON CONFLICT (status, slot) DO UPDATE SET runs = t.runs + excluded.runs,
        changes = t.changes + excluded.changes,
        changed_at = greatest(t.changed_at, excluded.changed_at)
"""
_PG_SLOT = "get_byte(uuid_send({}), 15) % 16"

PG_TRIGGERS = [
    f"""
    CREATE FUNCTION airlock_tally_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO run_tallies AS t (status, slot, runs, changes, changed_at)
        SELECT status, {_PG_SLOT.format("id")}, count(*), count(*), max(updated_at)
        FROM inserted GROUP BY 1, 2 ORDER BY 1, 2
        {_PG_UPSERT};
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION airlock_tally_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO run_tallies AS t (status, slot, runs, changes, changed_at)
        SELECT status, {_PG_SLOT.format("id")}, -count(*), count(*), NULL::timestamptz
        FROM deleted GROUP BY 1, 2 ORDER BY 1, 2
        {_PG_UPSERT};
        RETURN NULL;
    END $$
    """,
    f"""
    CREATE FUNCTION airlock_tally_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO run_tallies AS t (status, slot, runs, changes, changed_at)
        SELECT v.status, {_PG_SLOT.format("NEW.id")}, sum(v.d), 1, NEW.updated_at
        FROM (VALUES (OLD.status, -1), (NEW.status, 1)) AS v(status, d)
        GROUP BY v.status ORDER BY v.status
        {_PG_UPSERT};
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER run_tallies_inserted AFTER INSERT ON agent_runs
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT
    EXECUTE FUNCTION airlock_tally_inserted()
    """,
    """
    CREATE TRIGGER run_tallies_deleted AFTER DELETE ON agent_runs
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT
    EXECUTE FUNCTION airlock_tally_deleted()
    """,
    f"""
    CREATE TRIGGER run_tallies_updated AFTER UPDATE ON agent_runs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR NEW.{WAITING})
    EXECUTE FUNCTION airlock_tally_updated()
    """,
]

_SQLITE_UPSERT = """
    ON CONFLICT (status, slot) DO UPDATE SET runs = runs + excluded.runs,
        changes = changes + 1,
        changed_at = max(coalesce(changed_at, excluded.changed_at), excluded.changed_at);
"""


def _sqlite_add(status: str, runs: int) -> str:
    return (
        "INSERT INTO run_tallies (status, slot, runs, changes, changed_at) "
        f"VALUES ({status}, 0, {runs}, 1, NEW.updated_at) {_SQLITE_UPSERT}"
    )


SQLITE_TRIGGERS = [
    f"""
    CREATE TRIGGER run_tallies_inserted AFTER INSERT ON agent_runs BEGIN
        {_sqlite_add("NEW.status", 1)}
    END
    """,
    """
    CREATE TRIGGER run_tallies_deleted AFTER DELETE ON agent_runs BEGIN
        UPDATE run_tallies SET runs = runs - 1, changes = changes + 1
        WHERE status = OLD.status AND slot = 0;
    END
    """,
    f"""
    CREATE TRIGGER run_tallies_updated AFTER UPDATE ON agent_runs
    WHEN OLD.status IS NOT NEW.status OR NEW.{WAITING} BEGIN
        {_sqlite_add("OLD.status", -1)}
        {_sqlite_add("NEW.status", 1)}
    END
    """,
]
# (on SQLite, a run that stays waiting adds 1 and takes 1 away from the same row)

RECOUNT = """
    INSERT INTO run_tallies (status, slot, runs, changes, changed_at)
    SELECT status, {slot}, count(*), count(*), max(updated_at) FROM agent_runs GROUP BY 1, 2
"""


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "run_tallies",
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("runs", sa.BigInteger(), nullable=False),
        sa.Column("changes", sa.BigInteger(), nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("status", "slot", name=op.f("pk_run_tallies")),
    )
    if postgres:
        # writers wait until this commits: the recount sees every run, and every later
        # write is counted by the triggers
        op.execute("LOCK TABLE agent_runs IN SHARE ROW EXCLUSIVE MODE")
    for statement in PG_TRIGGERS if postgres else SQLITE_TRIGGERS:
        op.execute(statement)
    op.execute(RECOUNT.format(slot=_PG_SLOT.format("id") if postgres else "0"))
    _indexes(postgres)


def _indexes(postgres: bool) -> None:
    where = sa.text(WAITING)
    op.create_index(
        "ix_agent_runs_waiting_since", "agent_runs", ["suspended_at"],
        postgresql_where=where, sqlite_where=where,
    )  # fmt: skip
    op.create_index(
        "ix_agent_runs_waiting_created", "agent_runs", ["created_at", "id"],
        postgresql_where=where, sqlite_where=where,
    )  # fmt: skip
    due = sa.text("due_at IS NOT NULL")
    op.drop_index("ix_outbox_due", table_name="outbox")
    op.create_index(
        "ix_outbox_due", "outbox", ["due_at", "id"], postgresql_where=due, sqlite_where=due
    )
    given_up = sa.text(GIVEN_UP)
    op.create_index(
        "ix_outbox_given_up", "outbox", ["id"], postgresql_where=given_up, sqlite_where=given_up
    )
    if postgres:
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute(
            "CREATE INDEX ix_agent_runs_waiting_search ON agent_runs"
            " USING gin (lower(CAST(metadata AS TEXT)) gin_trgm_ops)"
            f" WHERE {WAITING}"
        )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("DROP INDEX ix_agent_runs_waiting_search")
    op.drop_index("ix_outbox_given_up", table_name="outbox")
    op.drop_index("ix_outbox_due", table_name="outbox")
    due = sa.text("due_at IS NOT NULL")
    op.create_index("ix_outbox_due", "outbox", ["due_at"], postgresql_where=due, sqlite_where=due)
    op.drop_index("ix_agent_runs_waiting_created", table_name="agent_runs")
    op.drop_index("ix_agent_runs_waiting_since", table_name="agent_runs")
    for name in ("inserted", "deleted", "updated"):
        op.execute(f"DROP TRIGGER run_tallies_{name}" + (" ON agent_runs" if postgres else ""))
        if postgres:
            op.execute(f"DROP FUNCTION airlock_tally_{name}()")
    op.drop_table("run_tallies")
