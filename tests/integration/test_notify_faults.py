"""Notifications under faults (issue 46), with real workers, PostgreSQL and Redis: a worker
killed mid-send, a receiver down for minutes, Redis restarted. Every notification
reaches the receiver at least once, and each run's in order (its ``completed`` never
before its ``waiting_for_approval``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select

from airlock.persistence.domain import RunStatus
from airlock.persistence.store.sql import OUTBOX
from airlock.workers.testing import PrivateRedis, Stack, free_port, wait_for
from tests.integration.conftest import StackFactory
from tests.integration.test_faults import private_redis  # noqa: F401 - a fixture
from tests.integration.test_workers import approve

pytestmark = pytest.mark.integration


class Recorder(ThreadingHTTPServer):
    """A receiver that records each notification as it arrives: (run, type, webhook-id).
    While ``hold`` is clear, it answers nothing (the first delivery waits on it)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Recording)
        self.got: list[tuple[str, str, str]] = []
        self.hold = threading.Event()
        self.hold.set()

    def types(self, run_id: str) -> list[str]:
        """The run's notifications in the order they first arrived (a redelivery, under
        the same webhook-id, counts once)."""
        seen: dict[str, str] = {}
        for run, kind, webhook_id in list(self.got):
            if run == run_id:
                seen.setdefault(webhook_id, kind)
        return list(seen.values())


class _Recording(BaseHTTPRequestHandler):
    server: Recorder
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        event = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.got.append((event["data"]["id"], event["type"], self.headers["webhook-id"]))
        self.server.hold.wait(60)
        self.send_response(204)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        del args


@contextmanager
def receiving(port: int) -> Iterator[Recorder]:
    server = Recorder(port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.hold.set()
        server.shutdown()
        server.server_close()


ORDER = ["run.waiting_for_approval", "run.completed"]


def notifying(make_stack: StackFactory, port: int, broker: str, postgres_url: str) -> Stack:
    return make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=broker,
        AIRLOCK_NOTIFY_URL=f"http://127.0.0.1:{port}/hook",
        AIRLOCK_NOTIFY_TIMEOUT="2",
        AIRLOCK_NOTIFY_RETRY_MAX_DELAY="2",
        AIRLOCK_NOTIFY_MAX_ATTEMPTS="100",
    )


def undelivered(stack: Stack) -> int:
    with stack.service.store.engine.connect() as conn:
        rows = conn.execute(select(OUTBOX.c.delivered_at)).all()
    return sum(1 for row in rows if row.delivered_at is None)


def attempts_of_first(stack: Stack) -> int:
    with stack.service.store.engine.connect() as conn:
        return int(conn.execute(select(OUTBOX.c.attempts).order_by(OUTBOX.c.id)).scalar() or 0)


def run_to_completion(stack: Stack, runs: int) -> list[str]:
    ids = [stack.service.start_run("w1", f"mail {i}")[0].id for i in range(runs)]
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
        approve(stack, run_id)
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.COMPLETED)
    return ids


def test_a_receiver_down_for_minutes_gets_every_notification_in_order(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    port = free_port()
    stack = notifying(make_stack, port, shared_redis, postgres_url)
    stack.worker(airlock=True)
    ids = run_to_completion(stack, 5)
    # nothing listens: every attempt is refused, the endpoint's pause grows, minutes pass
    wait_for("six refused attempts", lambda: attempts_of_first(stack) >= 6, timeout=300)
    assert undelivered(stack) == 10
    with receiving(port) as receiver:
        wait_for("every notification", lambda: undelivered(stack) == 0, timeout=120)
        for run_id in ids:
            assert receiver.types(run_id) == ORDER


def test_a_worker_killed_mid_send_leaves_its_notification_to_another(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    port = free_port()
    stack = notifying(make_stack, port, shared_redis, postgres_url)
    with receiving(port) as receiver:
        receiver.hold.clear()  # the first delivery is held, unanswered
        first = stack.worker(airlock=True)
        run, _ = stack.service.start_run("w1", "mail")
        stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
        wait_for("the held delivery", lambda: receiver.got)
        first.kill()
        receiver.hold.set()
        stack.worker(airlock=True)
        approve(stack, run.id)
        stack.wait_status(run.id, RunStatus.COMPLETED)
        wait_for("every notification", lambda: undelivered(stack) == 0, timeout=60)
        assert receiver.types(run.id) == ORDER
        # the held one was sent again, under its webhook-id, by the second worker
        assert len(receiver.got) >= 3


def test_notifications_survive_a_redis_restart(
    make_stack: StackFactory,
    postgres_url: str,
    private_redis: PrivateRedis,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    port = free_port()
    stack = notifying(make_stack, port, private_redis.url, postgres_url)
    with receiving(port) as receiver:
        stack.worker(airlock=True)
        ids = [stack.service.start_run("w1", f"mail {i}")[0].id for i in range(4)]
        for run_id in ids:
            stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL)
        private_redis.stop()
        private_redis.start()
        for run_id in ids:
            approve(stack, run_id)
        for run_id in ids:
            stack.wait_status(run_id, RunStatus.COMPLETED, timeout=90)
        wait_for("every notification", lambda: undelivered(stack) == 0, timeout=60)
        for run_id in ids:
            assert receiver.types(run_id) == ORDER
