"""Notifications are delivered by consumers of their own (issue 26, defect 11): a
receiver that never answers holds a delivery, never a worker that runs segments."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from airlock.persistence.domain import RunStatus
from airlock.persistence.migrate import upgrade as migrate
from airlock.persistence.store.sql import OUTBOX
from airlock.workers.testing import Stack, wait_for
from tests.api.test_notify import RawReceiver, serving
from tests.integration.conftest import StackFactory
from tests.integration.test_workers import approve

pytestmark = pytest.mark.integration


class Holder(RawReceiver):
    """Takes each delivery and answers nothing until released; ``hung_up`` records a
    delivery whose client closed the connection first."""

    def __init__(self) -> None:
        super().__init__(self._hold)
        self.release = threading.Event()
        self.held: list[int] = []

    def _hold(self, connection: socket.socket) -> None:
        self.held.append(1)
        connection.settimeout(0.05)
        while not self.release.is_set():
            try:
                if connection.recv(1) == b"":
                    raise ConnectionResetError("the client hung up")
            except TimeoutError:
                continue
        connection.sendall(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")


def delivered(stack: Stack) -> int:
    """Notifications delivered (settled with a 2xx)."""
    with stack.service.store.engine.connect() as conn:
        rows = conn.execute(select(OUTBOX.c.delivered_at)).all()
    return sum(1 for row in rows if row.delivered_at is not None)


@pytest.fixture(params=["redis", "embedded"])
def notifying_stack(
    request: pytest.FixtureRequest, make_stack: StackFactory, tmp_path: Path
) -> tuple[Stack, Holder]:
    holder = Holder()
    settings = {"AIRLOCK_NOTIFY_URL": holder.url, "AIRLOCK_NOTIFY_TIMEOUT": "50"}
    if request.param == "redis":
        settings["AIRLOCK_DATABASE_URL"] = request.getfixturevalue("postgres_url")
        settings["AIRLOCK_BROKER_URL"] = request.getfixturevalue("shared_redis")
    else:
        url = f"sqlite:///{tmp_path / 'airlock.db'}"
        migrate(url)
        settings |= {"AIRLOCK_DATABASE_URL": url, "AIRLOCK_BROKER_URL": "filesystem://"}
    return make_stack(**settings), holder


def test_a_receiver_that_never_answers_holds_no_segment(
    notifying_stack: tuple[Stack, Holder],
) -> None:
    """``airlock worker`` as shipped (one Celery worker that consumes the
    notifications too): while the
    receiver holds the first delivery's connection open, the run is approved and
    completes. Before, the one worker was held by the delivery, and the run completed
    only once the delivery's read timed out and its connection was closed."""
    stack, holder = notifying_stack
    with serving(holder):
        try:
            stack.worker(airlock=True)
            run, _ = stack.service.start_run("w1", "mail")
            stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
            wait_for("the receiver to hold the delivery", lambda: holder.held)
            approve(stack, run.id)
            stack.wait_status(run.id, RunStatus.COMPLETED)
            assert holder.hung_up == []  # the first delivery is still held
        finally:
            holder.release.set()
        # released, both notifications are delivered
        wait_for("both notifications", lambda: delivered(stack) == 2, timeout=60)
    assert holder.hung_up == [False] * len(holder.hung_up)
