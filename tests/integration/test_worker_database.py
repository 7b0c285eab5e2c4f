"""A real worker that cannot use its database says so (issue 42): in its log, at
WARNING, naming the database with its password hidden and what is wrong, again after a
growing backoff, and once it can, that it can; each segment it cannot run says the same
before it is tried again; and ``airlock health worker`` fails naming the database. It
said nothing of its database before, retrying each segment for ever."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from airlock.persistence.migrate import upgrade
from airlock.workers.testing import ROOT, airlock_env, free_port, wait_for
from tests.integration.conftest import StackFactory

pytestmark = pytest.mark.integration

CHECKS_AGAIN = re.compile(r"WARNING/MainProcess\] (.*); this worker checks again in \d+ s")


def warnings_of(output: str) -> list[str]:
    return CHECKS_AGAIN.findall(output)


def test_a_worker_whose_postgres_is_away_says_so_and_is_unhealthy(
    make_stack: StackFactory, shared_redis: str, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://airlock:s3cret-pw@127.0.0.1:{port}/airlock"
    shown = f"postgresql+psycopg://airlock:***@127.0.0.1:{port}/airlock"
    stack = make_stack(AIRLOCK_DATABASE_URL=url, AIRLOCK_BROKER_URL=shared_redis)
    worker = stack.worker(airlock=True)
    said = wait_for(
        "two warnings of the worker on its database",
        lambda: (found := warnings_of(worker.output()))[1:] and found,
        timeout=60,
    )
    for line in said:
        assert line.startswith(f"cannot use the database {shown}: "), line
        assert "Connection refused" in line, line
    run_id = str(uuid.uuid4())
    stack.enqueue(run_id)
    wait_for(
        "the segment's warning",
        lambda: f"the segment of run {run_id} is tried again in" in worker.output(),
        timeout=30,
    )
    assert f"cannot use the database {shown} (" in worker.output()
    health = subprocess.run(
        [sys.executable, "-m", "airlock.workers", "health", "worker", "--timeout", "10"],
        env=airlock_env(stack.config, stack.outbox), cwd=ROOT,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert health.returncode == 1, health.stdout + health.stderr
    assert health.stdout.startswith("worker: w1@"), health.stdout
    assert f"answered, but cannot use the database {shown}: " in health.stdout
    assert "s3cret-pw" not in worker.output() + health.stdout


def test_a_worker_on_sqlite_says_its_folder_is_missing_until_it_is_made(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    folder = tmp_path / "not-yet"
    url = f"sqlite:///{folder / 'airlock.db'}"
    stack = make_stack(AIRLOCK_DATABASE_URL=url)  # the embedded broker: nothing else to run
    worker = stack.worker(airlock=True)
    said = wait_for("the worker's warning", lambda: warnings_of(worker.output()), timeout=60)
    assert said[0] == f"cannot use the database {url}: the folder {folder} does not exist"
    folder.mkdir()
    upgrade(url)
    wait_for(
        "the worker to say its database is ready",
        lambda: f"the database {url} is ready" in worker.output(),
        timeout=90,
    )
