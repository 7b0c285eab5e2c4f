"""The notification dispatcher (issue 46), on both databases: a claim's notifications are
sent concurrently, a slow receiver's delivery holds no other, a run's events go in
order, and an endpoint that fails is left alone for a while."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, select

from airlock.persistence.store.sql import OUTBOX
from airlock.workers.service import DeliveryError, Retries, Service
from airlock.workers.service.views import run_view
from airlock.workers.tasks.dispatcher import Dispatcher, Endpoint
from airlock.workers.testing import wait_for
from tests.conftest import FakeClock
from tests.contract.test_outbox import OPERATOR, notifying_service

Send = Callable[[str, str], int]


@contextmanager
def dispatching(service: Service, send: Send, concurrency: int = 8) -> Iterator[Dispatcher]:
    lags: list[float] = []
    dispatcher = Dispatcher(
        service,
        send,
        lambda run: run_view(service, run),
        concurrency=concurrency,
        retries=Retries(),
        observe=lags.append,
        poll=0.05,
    )
    dispatcher.start()
    try:
        yield dispatcher
    finally:
        dispatcher.stop()


def waiting_runs(service: Service, n: int) -> list[str]:
    ids = []
    for i in range(n):
        run, _ = service.start_run("mailer", f"go {i}")
        service.run_segment(run.id, "w")
        ids.append(run.id)
    return ids


def notified(service: Service, run_id: str) -> int:
    """The run's notifications delivered (settled with a 2xx)."""
    with service.store.engine.connect() as conn:
        rows = conn.execute(
            select(OUTBOX.c.delivered_at).where(OUTBOX.c.run_id == uuid.UUID(run_id))
        ).all()
    return sum(1 for row in rows if row.delivered_at is not None)


def test_a_receiver_that_holds_one_delivery_holds_no_other(
    engine: Engine, clock: FakeClock
) -> None:
    """Before, deliveries went one after another in one task: a receiver slow to answer
    one notification held every notification behind it."""
    service, _ = notifying_service(engine, clock)
    held, released = waiting_runs(service, 1)[0], threading.Event()
    others = waiting_runs(service, 3)

    def send(body: str, webhook_id: str) -> int:
        if json.loads(body)["data"]["id"] == held:
            released.wait(30)
        return 204

    with dispatching(service, send) as dispatcher:
        wait_for("the others' deliveries", lambda: all(notified(service, r) for r in others))
        assert notified(service, held) == 0 and dispatcher.in_flight == 1
        released.set()
        wait_for("the held delivery", lambda: notified(service, held))


def test_a_runs_events_reach_the_receiver_in_order(engine: Engine, clock: FakeClock) -> None:
    service, _ = notifying_service(engine, clock)
    run_ids = waiting_runs(service, 5)
    for run_id in run_ids:
        service.cancel(run_id, by=OPERATOR)
    received: list[tuple[str, str]] = []
    lock = threading.Lock()

    def send(body: str, webhook_id: str) -> int:
        event = json.loads(body)
        with lock:
            received.append((event["data"]["id"], event["type"]))
        return 204

    with dispatching(service, send):
        wait_for("every notification", lambda: len(received) == 10)
    for run_id in run_ids:
        assert [t for r, t in received if r == run_id] == [
            "run.waiting_for_approval",
            "run.cancelled",
        ]


def test_an_endpoint_that_fails_is_left_alone_for_a_while(engine: Engine, clock: FakeClock) -> None:
    """A receiver that is down is not sent every row that falls due meanwhile: after a
    retryable failure, its endpoint waits a backoff of its own."""
    service, _ = notifying_service(engine, clock)
    waiting_runs(service, 3)
    tries: list[str] = []

    def send(body: str, webhook_id: str) -> int:
        tries.append(webhook_id)
        raise DeliveryError("receiver answered 503", status_code=503)

    with dispatching(service, send, concurrency=1) as dispatcher:
        wait_for("a first try", lambda: tries)
        wait_for("the endpoint's pause", lambda: dispatcher.endpoint.ready_in() > 0)
    assert len(tries) == 1  # the other two were not tried while the endpoint waits


def test_a_final_refusal_does_not_pause_the_endpoint() -> None:
    endpoint = Endpoint()
    endpoint.record(delivered=False)
    assert endpoint.ready_in() > 0
    endpoint.record(delivered=True)
    assert endpoint.ready_in() == 0


def test_a_transition_wakes_the_dispatcher(engine: Engine, clock: FakeClock) -> None:
    """The dispatcher sleeps between looks (``POLL``); a wake-up starts a look at once."""
    service, _ = notifying_service(engine, clock)
    sent: list[str] = []

    def send(body: str, webhook_id: str) -> int:
        sent.append(webhook_id)
        return 204

    dispatcher = Dispatcher(
        service,
        send,
        lambda run: run_view(service, run),
        concurrency=4,
        retries=Retries(),
        poll=3600.0,  # never looks again by itself within the test
    )
    dispatcher.start()
    try:
        waiting_runs(service, 1)
        dispatcher.wake()
        wait_for("the woken delivery", lambda: sent)
    finally:
        dispatcher.stop()
