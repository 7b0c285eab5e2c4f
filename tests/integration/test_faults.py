"""Server restarts. Each test starts its own private PostgreSQL or Redis on a free port,
so restarting it never disturbs the shared services other tests use."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from airlock.persistence.domain import RunStatus
from airlock.persistence.migrate import upgrade as migrate
from airlock.workers.testing import PrivatePostgres, PrivateRedis, Stack, postgres_bin, wait_for
from tests.integration.conftest import StackFactory
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


@pytest.mark.parametrize(
    ("down", "airlock", "budget"),
    [("stop", False, "30"), ("crash", False, "30"), ("crash", True, "30"), ("stop", True, "1")],
)
def test_postgres_restart_during_a_run(  # noqa: PLR0917 - fixtures and parameters
    make_stack: StackFactory,
    private_postgres: PrivatePostgres,
    shared_redis: str,
    down: str,
    airlock: bool,
    budget: str,
) -> None:
    """``crash`` comes milliseconds after the claim, which does not wait for the disk:
    the restarted server may or may not have it, and the run completes either way.
    ``airlock``: ``airlock worker`` as shipped, not ``celery worker -c 2``. ``budget``:
    ``AIRLOCK_DB_RETRY_SECONDS``; with 1 s the segment gives up its turn while the
    database is down and its task continues the run later, never failing it."""
    migrate(private_postgres.url)
    stack = make_stack(
        AIRLOCK_DATABASE_URL=private_postgres.url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_DB_RETRY_SECONDS=budget,
    )
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
    # the tool finishes while the database is down: recording it fails, and the segment
    # retries on a fresh connection (past AIRLOCK_DB_RETRY_SECONDS, the task would)
    said = "retrying on a fresh connection" if budget == "30" else "is tried again in"
    wait_for("the segment to meet the dead database", lambda: said in worker.output(), timeout=30)
    private_postgres.start()
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL, timeout=90)
    approve(stack, run.id)
    done = stack.wait_status(run.id, RunStatus.COMPLETED, timeout=60)
    assert done.output == "done"
    assert stack.executions()[send_key(run.id)] == 1


@pytest.mark.parametrize("airlock", [False, True], ids=["prefork", "airlock-worker-gevent"])
def test_redis_restart_with_a_segment_in_flight(
    make_stack: StackFactory, postgres_url: str, private_redis: PrivateRedis, airlock: bool
) -> None:
    stack: Stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url, AIRLOCK_BROKER_URL=private_redis.url
    )
    worker = stack.worker(airlock=airlock)
    assert f"({'gevent' if airlock else 'prefork'})" in worker.output()  # Celery's banner
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
    # Celery 5.7.0 closes the broken connection after collecting it (celery#10242, for
    # celery#9705), which tries once more to put back the message of the segment still
    # running, through a transport already let go: kombu logs this line and goes on.
    # The message could not go back anyway while Redis is down (the gevent worker's
    # first try says ConnectionError); the segment it woke goes on and is recorded
    # (above). Any other AttributeError is a failure.
    assert "AttributeError" not in RESTORE_HOSTNAME.sub("", worker.output())


RESTORE_HOSTNAME = re.compile(
    r"UNABLE TO RESTORE \d+ MESSAGES: "
    r"\(AttributeError\(\"'NoneType' object has no attribute 'hostname'\"\),\)"
)
"""kombu's line when Celery 5.7.0's second try to put back a worker's unacknowledged
messages, on a broker connection lost, meets the transport it let go."""


@pytest.mark.parametrize("pool", ["prefork", "gevent"])
def test_a_broker_blip_costs_no_segment_its_work(
    make_stack: StackFactory, postgres_url: str, private_redis: PrivateRedis, pool: str
) -> None:
    """Redis closes every client's connection (``CLIENT KILL``: a proxy's or a
    failover's blip, Redis itself stays up) while segments wait on their models. The
    worker reconnects; the segments in flight go on (their messages, given back by the
    broker, are wake-ups of runs already claimed: no-ops), so every run reaches its
    approval with its two model calls, none made twice and none waiting for a lease."""
    runs = 6 if pool == "prefork" else 30
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=private_redis.url,
        AIRLOCK_TEST_MODEL_SECONDS="3",
        AIRLOCK_LEASE_SECONDS="600",  # a segment given up would wait this long to be redone
    )
    # gevent: airlock worker's default on Redis (-c 200); prefork, as an operator asks
    options = () if pool == "gevent" else ("-P", "prefork", "-c", str(runs))
    worker = stack.worker(airlock=True, options=options)
    assert f"({pool})" in worker.output()  # Celery's banner: concurrency N (pool)
    ids = [stack.service.start_run("slow_model", f"mail {i}")[0].id for i in range(runs)]
    wait_for("every model call to start", lambda: stack.starts()["model.start -"] >= runs)
    client = redis.Redis(port=private_redis.port)
    assert client.client_kill_filter(_type="normal", skipme=True) > 0
    client.close()
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    assert stack.starts()["model.start -"] == 2 * runs  # no segment ran twice
    assert worker.alive, worker.output()[-3000:]
    fresh, _ = stack.service.start_run("w1", "after the blip")
    stack.wait_status(fresh.id, RunStatus.WAITING_FOR_APPROVAL, timeout=30)


def _answers_a_ping(stack: Stack, name: str) -> bool:
    try:
        return bool(stack.celery.control.ping(destination=[name], timeout=1))
    except (OSError, redis.RedisError):  # the test's own client meeting the restart
        return False


@pytest.mark.parametrize("busy", [True, False], ids=["every-slot-busy", "slots-free"])
def test_a_gevent_worker_answers_remote_control_after_a_redis_restart(
    make_stack: StackFactory, postgres_url: str, private_redis: PrivateRedis, busy: bool
) -> None:
    """``airlock worker`` (gevent, the default on Redis) keeps answering remote control
    (``celery inspect ping``) after Redis restarts, whether its segments fill every
    slot, waiting on their models, or none (airlock.workers.tasks.green_pidbox)."""
    slots = 4
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=private_redis.url,
        AIRLOCK_TEST_MODEL_SECONDS="6" if busy else "0",
        AIRLOCK_LEASE_SECONDS="600",
    )
    worker = stack.worker(airlock=True, options=("-c", str(slots)))
    assert f"{slots} (gevent)" in worker.output()  # Celery's banner: the default pool
    name = f"w1@{socket.gethostname()}"
    wait_for("a ping before the restart", lambda: _answers_a_ping(stack, name), timeout=10)
    ids = []
    if busy:
        ids = [stack.service.start_run("slow_model", f"mail {i}")[0].id for i in range(slots)]
        wait_for("every slot's model call", lambda: stack.starts()["model.start -"] >= slots)
    private_redis.stop()
    private_redis.start()
    wait_for("a ping after the restart", lambda: _answers_a_ping(stack, name), timeout=30)
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    assert worker.alive, worker.output()[-3000:]
    fresh, _ = stack.service.start_run("w1", "after the restart")
    stack.wait_status(fresh.id, RunStatus.WAITING_FOR_APPROVAL, timeout=30)
    assert _answers_a_ping(stack, name)
