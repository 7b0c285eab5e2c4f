"""Parked runs at scale (issue 46): what `airlock stats`, `/metrics` and the queue's
stream read costs what changed, not what waits.

- ``run_tallies``: runs per status (a column each, one row per slot: 16 on PostgreSQL,
  where a run's slot is the last byte of its id mod 16, so that transitions of
  different runs seldom wait on one row; one on SQLite), and the count and latest time
  of the writes to the waiting queue, kept by triggers on ``agent_runs`` in the
  transaction of every write (every writer goes through them), and recounted here from
  the runs already stored;
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
STATUSES = ("queued", "running", "waiting_for_approval", "completed", "failed", "cancelled")
"""The statuses at this revision, each a column of ``run_tallies``."""
SLOTS = 16
"""Rows of ``run_tallies`` on PostgreSQL (one on SQLite)."""
PG_SLOT = "get_byte(uuid_send({}), 15) % 16"

# One row per slot, a column per status: a transaction that writes one run updates one
# row (its run's slot's), however many statements it makes, so two transactions never
# wait on each other's tally rows in a cycle; one that writes many (a purge's batch, an
# insert of many) takes the rows in slot order, in one statement.


def _moved(old: str | None, new: str | None) -> str:
    """SET clauses adding one run of ``new`` and taking one of ``old`` away (status
    expressions, e.g. ``OLD.status``), and counting a change of the waiting queue."""

    def d(status: str) -> str:
        plus = f" + ({new} = '{status}')::int" if new else ""
        minus = f" - ({old} = '{status}')::int" if old else ""
        return f"{status} = {status}{plus}{minus}"

    touches = " OR ".join(f"{e} = 'waiting_for_approval'" for e in (old, new) if e)
    return ", ".join(
        [*(d(s) for s in STATUSES), f"waiting_changes = waiting_changes + ({touches})::int"]
    )


def _sums(source: str, sign: str) -> str:
    """Per slot, the runs of ``source`` per status (times ``sign``) and their waiting ones'
    latest ``updated_at``, ordered by slot."""
    counts = ", ".join(f"{sign}count(*) FILTER (WHERE status = '{s}') AS {s}" for s in STATUSES)
    return (
        f"SELECT {PG_SLOT.format('id')} AS slot, {counts},"
        " max(updated_at) FILTER (WHERE " + WAITING + ") AS waiting_at,"
        " count(*) FILTER (WHERE " + WAITING + ") AS waiting_changes"
        f" FROM {source} GROUP BY 1 ORDER BY 1"
    )


def _pg_many(name: str, source: str, sign: str) -> str:
    sets = ", ".join(f"{s} = {s} + d.{s}" for s in STATUSES)
    return f"""
    CREATE OR REPLACE FUNCTION airlock_tally_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE d record;
    BEGIN
        FOR d IN {_sums(source, sign)} LOOP
            UPDATE run_tallies SET {sets},
                waiting_changes = waiting_changes + d.waiting_changes,
                waiting_changed_at = greatest(waiting_changed_at, d.waiting_at)
            WHERE slot = d.slot;
        END LOOP;
        RETURN NULL;
    END $$
    """


PG_TRIGGERS = [
    _pg_many("inserted", "inserted", ""),
    _pg_many("deleted", "deleted", "-"),
    f"""
    CREATE OR REPLACE FUNCTION airlock_tally_updated() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE run_tallies SET {_moved("OLD.status", "NEW.status")},
            waiting_changed_at = CASE WHEN OLD.{WAITING} OR NEW.{WAITING}
                THEN greatest(waiting_changed_at, NEW.updated_at) ELSE waiting_changed_at END
        WHERE slot = {PG_SLOT.format("NEW.id")};
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


def _sqlite(name: str, old: str | None, new: str | None, when: str = "") -> str:
    moved = _moved(old, new).replace("::int", "")
    at = "NEW.updated_at" if new else "NULL"
    waiting = f"max(coalesce(waiting_changed_at, {at}), {at})" if new else "waiting_changed_at"
    event = {"inserted": "INSERT", "deleted": "DELETE", "updated": "UPDATE"}[name]
    return f"""
    CREATE TRIGGER run_tallies_{name} AFTER {event} ON agent_runs {when} BEGIN
        UPDATE run_tallies SET {moved},
            waiting_changed_at = CASE WHEN {new or old} = 'waiting_for_approval'
                OR {old or new} = 'waiting_for_approval' THEN {waiting}
                ELSE waiting_changed_at END
        WHERE slot = 0;
    END
    """


SQLITE_TRIGGERS = [
    _sqlite("inserted", None, "NEW.status"),
    _sqlite("deleted", "OLD.status", None),
    _sqlite(
        "updated", "OLD.status", "NEW.status", f"WHEN OLD.status IS NOT NEW.status OR NEW.{WAITING}"
    ),
]


def recount(postgres: bool) -> list[str]:
    """The statements that set every slot's tallies to the runs counted (each slot's
    ``waiting_changes`` goes on, one more)."""
    slot = PG_SLOT.format("id") if postgres else "0"
    zero = ", ".join(f"{s} = 0" for s in STATUSES)
    counts = ", ".join(f"sum(CASE WHEN status = '{s}' THEN 1 ELSE 0 END) AS {s}" for s in STATUSES)
    sets = ", ".join(f"{s} = c.{s}" for s in STATUSES)
    return [
        f"UPDATE run_tallies SET {zero}, waiting_changes = waiting_changes + 1",
        f"UPDATE run_tallies SET {sets}, waiting_changed_at = c.waiting_at"
        f" FROM (SELECT {slot} AS slot, {counts}, max(CASE WHEN {WAITING} THEN updated_at END)"
        " AS waiting_at FROM agent_runs GROUP BY 1) AS c WHERE run_tallies.slot = c.slot",
    ]


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "run_tallies",
        sa.Column("slot", sa.SmallInteger(), autoincrement=False, nullable=False),
        *(sa.Column(s, sa.BigInteger(), nullable=False) for s in STATUSES),
        sa.Column("waiting_changes", sa.BigInteger(), nullable=False),
        sa.Column("waiting_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("slot", name=op.f("pk_run_tallies")),
    )
    zeros = ", ".join("0" for _ in STATUSES)
    for slot in range(SLOTS if postgres else 1):
        op.execute(f"INSERT INTO run_tallies VALUES ({slot}, {zeros}, 0, NULL)")
    if postgres:
        # writers wait until this commits: the recount sees every run, and every later
        # write is counted by the triggers
        op.execute("LOCK TABLE agent_runs IN SHARE ROW EXCLUSIVE MODE")
    for statement in [*(PG_TRIGGERS if postgres else SQLITE_TRIGGERS), *recount(postgres)]:
        op.execute(statement)
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
