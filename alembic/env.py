"""Migrations run against AIRLOCK_DATABASE_URL (or a connection handed in by the caller)."""

from __future__ import annotations

import sys
from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from airlock.persistence.db import make_engine
from airlock.persistence.metadata import METADATA
from airlock.persistence.migrate import MIGRATION_LOCK
from airlock.persistence.models import compared

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=METADATA,
        render_as_batch=sqlite,
        compare_type=True,
        include_name=compared,
    )
    if not sqlite or connection.in_transaction():
        with context.begin_transaction():
            if not sqlite:  # held to the commit; alembic reads the version after it
                _take_turn(connection)
            context.run_migrations()
        return
    # A batch migration copies a table and drops the old one; SQLite runs a parent's
    # DROP TABLE as a DELETE that cascades to its children's rows while foreign keys
    # are enforced. So they are not, while migrating (SQLite's own procedure for
    # schema changes; the pragma has no effect inside a transaction, so it is set
    # before the first), and the result is checked before it is committed.
    raw = connection.connection.dbapi_connection
    assert raw is not None
    raw.execute("PRAGMA foreign_keys=OFF")
    try:
        with context.begin_transaction():
            context.run_migrations()
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"a migration left rows without their parent: {broken[:5]}")
    finally:
        raw.execute("PRAGMA foreign_keys=ON")


def _take_turn(connection: Connection) -> None:
    """Take the migration lock; while another migrator holds it, say so and wait (a
    migrator that says nothing looks hung)."""
    took = connection.exec_driver_sql(f"SELECT pg_try_advisory_xact_lock({MIGRATION_LOCK})")
    if not took.scalar():
        print(
            "airlock: another migrator holds the migration lock (PostgreSQL advisory lock"
            f" {MIGRATION_LOCK}); waiting for it",
            file=sys.stderr,
            flush=True,
        )
        connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")


def main() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    engine = make_engine(config.attributes.get("url"))
    with engine.connect() as conn:
        run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
main()
