"""Server restarts. Each test starts its own private PostgreSQL or Redis on a free port,
so restarting it never disturbs the shared services other tests use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.domain import RunStatus
from tests.conftest import migrate
from tests.integration.conftest import StackFactory
from tests.integration.harness import PrivatePostgres, PrivateRedis, Stack, postgres_bin, wait_for
from tests.integration.test_workers import approve, send_key

pytestmark = pytest.mark.integration


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    if postgres_bin("initdb") is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    server = PrivatePostgres()
    server.init()
    yield server
    server.remove()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize(("down", "airlock"), [("stop", False), ("crash", False), ("crash", True)])
def test_postgres_restart_during_a_run(
    make_stack: StackFactory,
    private_postgres: PrivatePostgres,
    shared_redis: str,
    down: str,
    airlock: bool,
) -> None:
    """``crash`` comes milliseconds after the claim, which does not wait for the disk:
    the restarted server may or may not have it, and the run completes either way.
    ``airlock``: ``airlock worker`` as shipped, not ``celery worker -c 2``."""
    migrate(private_postgres.url)
    stack = make_stack(AIRLOCK_DATABASE_URL=private_postgres.url, AIRLOCK_BROKER_URL=shared_redis)
    worker = stack.worker(airlock=airlock)
    stack.beat()
    run, _ = stack.service.start_run("slow_read", "mail")
    wait_for(
        "the slow lookup",
        lambda: stack.starts()[f"lookup.start {run.id}:call_0_0"],
        interval=0.005,
    )
    if down == "crash":
        private_postgres.crash()
    else:
        private_postgres.stop()
    # the tool finishes while the database is down: recording it fails, the task retries
    wait_for(
        "the segment to meet the dead database",
        lambda: "database unavailable; retrying" in worker.output(),
        timeout=30,
    )
    private_postgres.start()
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL, timeout=90)
    approve(stack, run.id)
    done = stack.wait_status(run.id, RunStatus.COMPLETED, timeout=60)
    assert done.output == "done"
    assert stack.executions()[send_key(run.id)] == 1


@pytest.mark.parametrize("airlock", [False, True], ids=["prefork", "airlock-worker"])
def test_redis_restart_with_a_segment_in_flight(
    make_stack: StackFactory, postgres_url: str, private_redis: PrivateRedis, airlock: bool
) -> None:
    stack: Stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url, AIRLOCK_BROKER_URL=private_redis.url
    )
    worker = stack.worker(airlock=airlock)
    stack.beat()
    run, _ = stack.service.start_run("slow_read", "mail")
    wait_for("the slow lookup", lambda: stack.starts()[f"lookup.start {run.id}:call_0_0"])
    private_redis.stop()
    private_redis.start()
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL, timeout=90)
    approve(stack, run.id)
    stack.wait_status(run.id, RunStatus.COMPLETED, timeout=60)
    assert stack.executions()[send_key(run.id)] == 1
    # the worker survived the restart and keeps consuming
    assert worker.alive, worker.output()[-3000:]
    fresh, _ = stack.service.start_run("w1", "mail again")
    stack.wait_status(fresh.id, RunStatus.WAITING_FOR_APPROVAL, timeout=30)
    assert "AttributeError" not in worker.output()
