"""Which database URLs Airlock accepts, and what it makes of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.persistence.db import ConfigurationError, normalise_url


@pytest.mark.parametrize(
    ("given", "used"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u:p@h:5433/db", "postgresql+psycopg://u:p@h:5433/db"),
        ("sqlite:///./airlock.db", "sqlite:///./airlock.db"),
    ],
)
def test_postgresql_always_goes_through_psycopg(given: str, used: str) -> None:
    assert normalise_url(given) == used


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("mysql://u@h/db", "postgresql:// or sqlite://"),
        ("postgresql+pg8000://u@h/db", "'pg8000'"),
        ("postgresql+asyncpg://u@h/db", "'asyncpg'"),
        ("not a url", "is not a database URL"),
    ],
)
def test_other_urls_are_refused_naming_the_variable(given: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        normalise_url(given)
    assert "AIRLOCK_DATABASE_URL" in str(refused.value) and named in str(refused.value)


@pytest.mark.parametrize(
    "given",
    [
        "mysql://airlock:s3cret@db/airlock",
        "postgresql+asyncpg://airlock:s3cret@db/airlock",
        "postgresql://airlock:s3cret@db:port/airlock",  # SQLAlchemy cannot parse it
        "airlock:s3cret@db",
    ],
)
def test_a_refused_url_is_named_without_its_password(given: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        normalise_url(given)
    assert "AIRLOCK_DATABASE_URL" in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_a_database_error_does_not_carry_the_statements_parameters(tmp_path: Path) -> None:
    """Parameters are tool arguments and results: an error (logged, kept in a run's
    error) must not repeat them."""
    import sqlalchemy as sa

    from airlock.persistence.db import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as conn:
        conn.execute(sa.text("create table t (v text unique)"))
        conn.execute(sa.text("insert into t values (:v)"), {"v": "s3cret-argument"})
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("insert into t values (:v)"), {"v": "s3cret-argument"})
    except sa.exc.IntegrityError as exc:
        assert "s3cret-argument" not in str(exc)
        assert "insert into t" in str(exc)
    else:
        raise AssertionError("the duplicate insert was not refused")
    engine.dispose()
