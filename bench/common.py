"""What every benchmark shares: a throwaway migrated database, progress, the results file."""

from __future__ import annotations

import json
import os
import platform
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.conftest import migrate

PG = os.environ.get(
    "AIRLOCK_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("AIRLOCK_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/12"
RESULTS = Path(__file__).parent / "results"


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def temporary_database(server: str = PG) -> Iterator[str]:
    """A new database on ``server``, migrated to head, dropped afterwards."""
    name = f"airlock_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def record(benchmark: str, command: str, results: object, **details: object) -> None:
    """Append one run's results, with the command that made them, to results/<name>.jsonl."""
    RESULTS.mkdir(exist_ok=True)
    entry: dict[str, object] = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"python -m bench.{command}",
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        **details,
        "results": results,
    }
    with (RESULTS / f"{benchmark}.jsonl").open("a") as fh:
        fh.write(json.dumps(entry) + "\n")
