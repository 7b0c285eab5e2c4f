"""The API on a database whose schema is not this code's: ``/readyz`` says so, every
``/v1`` request is 503 problem+json naming ``airlock db upgrade`` (the app's plain
routes and its FastAPI routes alike), and once the database is migrated
the same app serves, without a restart."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from airlock.persistence.db import make_engine
from airlock.persistence.metadata import METADATA
from airlock.persistence.migrate import alembic_config, upgrade
from tests.api.conftest import Api, make_api
from tests.conftest import POSTGRES_URL

UPGRADE = "airlock db upgrade"


@pytest.fixture(params=["sqlite", "postgres"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database without a table (on SQLite, an empty file: one that is not there is
    another case, ``tests/api/test_probes.py``)."""
    if request.param == "sqlite":
        (tmp_path / "empty.db").touch()
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    request.getfixturevalue("postgres_template")  # skips where there is no PostgreSQL
    name = f"airlock_empty_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def bare(empty_url: str) -> Iterator[Api]:
    api = make_api(empty_url)
    yield api
    api.service.store.engine.dispose()


def not_ready(response: Any, *words: str) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == "/problems/schema-not-ready" and body["status"] == 503
    for word in (UPGRADE, *words):
        assert word in body["detail"], body
    return body


def every_v1_request(api: Api, *words: str) -> None:
    headers = api.headers()
    run = {"agent": "w1", "input": "mail 42"}
    not_ready(api.client.post("/v1/runs", json=run, headers=headers), *words)  # FastAPI
    not_ready(api.client.get("/v1/runs/r1", headers=headers), *words)  # a plain route
    not_ready(api.client.get("/v1/runs", headers=headers), *words)  # FastAPI
    not_ready(api.client.get("/v1/runs/r1/events", headers=headers), *words)  # FastAPI
    not_ready(api.client.post("/v1/runs/r1/cancel", headers=headers), *words)  # FastAPI
    not_ready(api.approve("r1", {"turn_digest": "d", "decision": "approve"}), *words)


def test_an_api_on_a_database_without_tables_says_so_then_serves_once_migrated(
    bare: Api, empty_url: str
) -> None:
    ready = bare.client.get("/readyz")
    assert ready.status_code == 503, ready.text
    assert ready.json()["schema"].startswith("missing:") and UPGRADE in ready.json()["schema"]
    every_v1_request(bare, "no tables")
    # still an authenticated API: the schema is no one's business before that
    assert bare.client.get("/v1/runs").status_code == 401

    upgrade(empty_url)

    assert bare.client.get("/readyz").status_code == 200
    assert bare.client.get("/readyz").json()["schema"] == "ok"
    view = bare.waiting()  # created (201), its segment run, read back
    accepted = bare.approve(
        view["id"], {"turn_digest": view["pending"]["turn_digest"], "decision": "approve"}
    )
    assert accepted.status_code == 202, accepted.text


def _revisions(url: str) -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(url))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def test_an_outdated_schema_is_named_with_its_revision(bare: Api, empty_url: str) -> None:
    older, head = _revisions(empty_url)[-2:]
    upgrade(empty_url, older)
    ready = bare.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["schema"].startswith("outdated:")
    every_v1_request(bare, older, head)
    upgrade(empty_url)
    assert bare.create()["status"] == "queued"


def test_a_database_newer_than_this_code_is_not_served(bare: Api, empty_url: str) -> None:
    upgrade(empty_url)
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00dcafe0099'"))
    engine.dispose()
    ready = bare.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["schema"].startswith("ahead:")
    every_v1_request(bare, "f00dcafe0099", "does not know")


def test_tables_dropped_under_a_serving_api_are_a_503_not_a_500(api: Api, db_url: str) -> None:
    """Served once (the schema is checked then, not on each request), then the tables
    go: the statement that fails on them is answered 503, on the fast path and on
    FastAPI's, and the API serves again once migrated."""
    run = api.create()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        METADATA.drop_all(conn)
        conn.execute(text("DROP TABLE alembic_version"))
    engine.dispose()
    not_ready(api.client.get(f"/v1/runs/{run['id']}", headers=api.headers()))  # a plain route
    not_ready(api.client.get("/v1/runs", headers=api.headers()))  # FastAPI
    upgrade(db_url)
    assert api.create()["status"] == "queued"


def test_an_unreachable_database_is_a_503_problem(tmp_path: Path) -> None:
    api = make_api(f"sqlite:///{tmp_path / 'no' / 'such' / 'folder.db'}")
    response = api.client.get("/v1/runs", headers=api.headers())
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["type"] == "/problems/database-unavailable"
    assert str(tmp_path) not in body["detail"]  # the clients are not told where it is
    assert api.client.get("/readyz").status_code == 503


def test_a_database_that_goes_away_under_a_serving_api_is_a_503_problem(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Served once (the schema known current), then PostgreSQL refuses the database's
    connections and ends those it had: each request, a plain route's or FastAPI's, a
    read's or a write's, is 503 ``database-unavailable`` (it was a plain-text 500), the
    log says why; and the API serves again once the database is back."""
    api = make_api(postgres_url)
    api.client = TestClient(api.client.app, raise_server_exceptions=False)
    run = api.create()
    name = make_url(postgres_url).database
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
            {"n": name},
        )
    try:
        headers = api.headers()
        for response in (
            api.client.get(f"/v1/runs/{run['id']}", headers=headers),  # a plain route
            api.client.get("/v1/runs", headers=headers),  # FastAPI
            api.client.post("/v1/runs", headers=headers, json={"agent": "w1", "input": "x"}),
        ):
            assert response.status_code == 503, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            body = response.json()
            assert body["type"] == "/problems/database-unavailable", body
            assert name not in body["detail"]
        assert "api.database_away" in [getattr(r, "action", "") for r in caplog.records]
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()
    assert api.client.get(f"/v1/runs/{run['id']}", headers=api.headers()).status_code == 200
    assert api.create()["status"] == "queued"


def test_the_api_says_at_start_that_its_schema_is_not_ready(
    empty_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    api = make_api(empty_url)
    with caplog.at_level(logging.WARNING, logger="airlock"), api.client:  # started and stopped
        pass
    api.service.store.engine.dispose()
    said = [r.getMessage() for r in caplog.records if r.name == "airlock"]
    assert any("no tables" in m and UPGRADE in m for m in said), said
