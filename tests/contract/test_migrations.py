"""The schema the migrations build is the schema the models describe, on both databases."""

from __future__ import annotations

import uuid
from datetime import datetime

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from airlock.persistence.metadata import METADATA
from airlock.persistence.migrate import alembic_config
from airlock.persistence.models import compared


def diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": compared}
        )
        return list(compare_metadata(context, METADATA))


def test_migrations_match_the_models(engine: Engine) -> None:
    assert diff(engine) == []


def test_alembic_check_passes(db_url: str) -> None:
    command.check(alembic_config(db_url))


def test_downgrade_base_then_upgrade_head(db_url: str, engine: Engine) -> None:
    cfg = alembic_config(db_url)
    command.downgrade(cfg, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    command.upgrade(cfg, "head")
    assert {"agent_runs", "run_events", "tool_calls", "decisions"} <= set(
        inspect(engine).get_table_names()
    )
    assert diff(engine) == []


def test_scoping_idempotency_keys_keeps_every_run_and_its_events(
    db_url: str, engine: Engine
) -> None:
    """0005 copies ``agent_runs`` on SQLite: its children's rows stay, and runs
    made before keep their keys, with no caller."""
    cfg = alembic_config(db_url)
    command.downgrade(cfg, "0004")
    runs = sa.table(
        "agent_runs",
        *(sa.column(c) for c in ("agent", "status", "input", "idempotency_key", "metadata")),
        *(sa.column(c) for c in ("iterations", "prompt_tokens", "completion_tokens")),
        *(sa.column(c) for c in ("attempts", "event_seq", "version")),
        sa.column("id", sa.Uuid()),
        sa.column("created_at", sa.DateTime()),
        sa.column("updated_at", sa.DateTime()),
    )
    events = sa.table(
        "run_events",
        sa.column("run_id", sa.Uuid()),
        *(sa.column(c) for c in ("seq", "kind", "payload")),
        sa.column("created_at", sa.DateTime()),
    )
    rid, now = uuid.uuid4(), datetime(2026, 12, 1)
    counters = dict.fromkeys(("iterations", "prompt_tokens", "completion_tokens", "attempts"), 0)
    with engine.begin() as conn:
        conn.execute(
            runs.insert().values(
                id=rid, agent="w1", status="queued", input="x", idempotency_key="k",
                metadata="{}", event_seq=1, version=1, created_at=now, updated_at=now,
                **counters,
            )
        )  # fmt: skip
        conn.execute(
            events.insert().values(run_id=rid, seq=1, kind="request", payload="{}", created_at=now)
        )
    command.upgrade(cfg, "head")
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from run_events")).scalar_one() == 1
        key, caller = conn.execute(sa.text("select idempotency_key, caller from agent_runs")).one()
    assert (key, caller) == ("k", None)
    assert diff(engine) == []


def test_migrators_that_start_at_once_take_turns(postgres_template: str) -> None:
    """Three ``airlock db upgrade`` at once on an empty PostgreSQL database (replicas'
    init containers): each waits on the migration lock while another holds it, then
    finds the schema at head. The test holds the lock first, so all three are seen
    waiting on it before any migrates."""
    import os
    import subprocess
    import sys

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from airlock.persistence.migrate import MIGRATION_LOCK
    from airlock.workers.testing import ROOT, wait_for
    from tests.conftest import POSTGRES_URL

    name = f"airlock_race_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    env = {**os.environ, "AIRLOCK_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "airlock.workers", "db", "upgrade"]
    holder = create_engine(url, isolation_level="AUTOCOMMIT")
    migrators: list[subprocess.Popen[str]] = []
    try:
        with holder.connect() as held:
            held.execute(text(f"SELECT pg_advisory_lock({MIGRATION_LOCK})"))
            for _ in range(3):
                migrators.append(
                    subprocess.Popen(argv, env=env, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                )  # fmt: skip
            waiting = text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = :db"
                " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
            )
            wait_for(
                "three migrators waiting on the lock",
                lambda: held.execute(waiting, {"db": name}).scalar() == 3,
                timeout=60,
            )
            held.execute(text(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})"))
        said = [m.communicate(timeout=120)[0] for m in migrators]
        assert [m.returncode for m in migrators] == [0, 0, 0], said
        # attack review: a migrator waiting on the lock said nothing, and looked hung
        assert all("another migrator holds the migration lock" in s for s in said), said
        engine = create_engine(url)
        with engine.connect() as conn:
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalars()
            assert list(version) == [_head(url)]
        engine.dispose()
    finally:
        for migrator in migrators:
            migrator.kill()
            migrator.wait()
        holder.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _head(url: str) -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert head is not None
    return head
