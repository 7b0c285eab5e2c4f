"""The probes look and never write (issue 42, item 6): ``/readyz``, ``/healthz`` and
``/metrics`` on the embedded default open the SQLite file read-only, so a database that
is not there yet is reported as such and not made (it was: an empty ``airlock.db`` with
its ``-wal`` and ``-shm``, then a 503), and one that is there gets no ``-wal`` or
``-shm`` from being looked at. On PostgreSQL, what a probe sends is only ever read."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from airlock.workers.testing import free_port
from tests.api.conftest import make_api
from tests.conftest import POSTGRES_URL

UPGRADE = "airlock db upgrade"
NEVER = {"last_run_at": None, "age_seconds": None, "stale_after_seconds": 60.0}
"""The sweeper's view before it ever ran (stale after 60 s by default)."""


def probe_everything(client: TestClient) -> dict[str, object]:
    """``/healthz``, ``/metrics`` and ``/readyz`` (whose body is returned)."""
    assert client.get("/healthz").json() == {"status": "ok"}
    client.get("/metrics")  # a figure it cannot read is the scraper's error, not a file
    ready = client.get("/readyz")
    body: dict[str, object] = ready.json()
    return {"status_code": ready.status_code, **body}


def test_readyz_on_a_database_file_not_there_says_so_and_makes_none(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    api = make_api(f"sqlite:///{folder / 'airlock.db'}")
    client = TestClient(api.client.app, raise_server_exceptions=False)
    ready = probe_everything(client)
    assert ready["status_code"] == 503
    assert ready["database"] == f"absent: the database file does not exist: run `{UPGRADE}`"
    assert ready["schema"] == "unknown: there is no database"
    assert str(folder) not in str(ready)  # unauthenticated: the path is not told
    assert list(folder.iterdir()) == [], "a probe made the database"


def test_readyz_on_a_database_nobody_has_open_adds_no_wal_to_it(
    sqlite_template: Path, tmp_path: Path
) -> None:
    """No connection is open (no ``-wal``, no ``-shm``): the file is read as it is, and
    stays alone and unchanged."""
    file = tmp_path / "airlock.db"
    shutil.copyfile(sqlite_template, file)
    before = hashlib.sha256(file.read_bytes()).hexdigest()
    api = make_api(f"sqlite:///{file}")
    ready = probe_everything(api.client)
    assert ready["status_code"] == 200, ready
    assert ready["database"] == "ok" and ready["schema"] == "ok"
    assert ready["sweeper"] == {"state": "never", **NEVER}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["airlock.db"]
    assert hashlib.sha256(file.read_bytes()).hexdigest() == before


def test_readyz_reads_what_the_api_wrote_through_its_wal(sqlite_url: str) -> None:
    """While the API's own connections hold the database open, a probe reads through
    their ``-wal``: it sees what was committed and not yet checkpointed."""
    api = make_api(sqlite_url)
    api.service.sweep()
    swept = api.client.get("/readyz").json()
    assert swept["database"] == "ok" and swept["sweeper"]["state"] == "ok"
    api.service.store.engine.dispose()


def test_readyz_on_postgres_sends_only_reads(postgres_template: str) -> None:
    """Proved on a database whose transactions are all read-only."""
    name = f"airlock_ro_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{postgres_template}"'))
        conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    api = make_api(url)
    try:
        ready = probe_everything(api.client)
        assert ready["status_code"] == 200, ready
        assert ready["database"] == "ok" and ready["schema"] == "ok"
        assert ready["sweeper"] == {"state": "never", **NEVER}
        with api.service.store.engine.connect() as conn:  # the setting holds
            assert conn.scalar(text("SHOW default_transaction_read_only")) == "on"
    finally:
        api.service.store.engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_readyz_says_a_database_it_cannot_reach_is_unreachable(tmp_path: Path) -> None:
    """Without saying where it is (the probe is unauthenticated)."""
    port = free_port()  # nothing listens there
    for url in (
        f"postgresql://airlock:s3cret@127.0.0.1:{port}/airlock",
        f"sqlite:///{tmp_path / 'no-such-folder' / 'airlock.db'}",
    ):
        api = make_api(url)
        ready = api.client.get("/readyz")
        assert ready.status_code == 503
        body = ready.json()
        assert body["database"] == "unreachable: the database cannot be reached"
        assert body["schema"] == "unknown: the database cannot be reached"
        assert str(port) not in ready.text and "no-such-folder" not in ready.text
    assert list(tmp_path.iterdir()) == []
