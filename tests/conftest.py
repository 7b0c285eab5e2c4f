"""Databases for the tests: SQLite files and PostgreSQL databases copied from a template.

The schema is built once per session by replaying the Alembic migrations; each
test gets its own copy (a file copy on SQLite, ``CREATE DATABASE … TEMPLATE`` on
PostgreSQL), so tests are isolated and cheap.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from airlock.persistence.db import make_engine
from airlock.persistence.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_URL = os.environ.get(
    "AIRLOCK_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
IN_CI = bool(os.environ.get("CI"))


def migrate(url: str, revision: str = "head") -> None:
    upgrade(url, revision)


class FakeClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _admin_engine() -> Engine:
    return create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")


def _postgres_available() -> str | None:
    try:
        engine = _admin_engine()
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except Exception as exc:
        return f"PostgreSQL at {POSTGRES_URL} is not reachable: {exc}"
    return None


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    problem = _postgres_available()
    if problem:
        if IN_CI:
            pytest.fail(problem)
        pytest.skip(problem)
    name = f"airlock_tpl_{os.getpid()}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    migrate(make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False))
    yield name
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    name = f"airlock_t_{uuid.uuid4().hex[:12]}"
    admin = _admin_engine()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{postgres_template}"'))
    yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    migrate(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "airlock.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()
