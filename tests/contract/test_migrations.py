"""The schema the migrations build is the schema the models describe, on both databases."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from alembic import command
from persistence.migrations import alembic_config
from persistence.models import Base


def diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


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
