"""Notifications go through a transactional outbox (issue 13, defect 10), on both databases.

A notification is recorded by the statement of the transition that causes it, so it
exists exactly when the transition happened; a failed wake-up leaves it due, and a
deliverer sends it later under one webhook-id however many attempts it takes.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.fernet import Fernet
from pydantic import JsonValue
from sqlalchemy import Engine, select

from airlock.loop import Agent, ScriptedModel
from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.persistence.store.sql import OUTBOX
from airlock.workers.service import MAX_DELIVERIES, EventType, Limits, Outcome, Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.outbound import TAKE_FOR
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from airlock.workers.tasks.notify import Delivery, DeliveryError, deliver_due
from tests.api.test_notify import Receiver as HttpReceiver
from tests.api.test_notify import serving
from tests.conftest import FakeClock
from tests.contract.test_gate import WRITE_THEN_ANSWER, gated_tools

OPERATOR = Principal.trusted("test")

URL = "http://receiver.invalid/hook"


class Receiver:
    """Stands for the receiving endpoint: records each POST, or fails as told."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.fail_with: str | None = None

    def __call__(self, url: str, secret: str | None, body: str, *, webhook_id: str) -> Delivery:
        assert url == URL
        if self.fail_with is not None:
            raise DeliveryError(self.fail_with)
        self.sent.append((webhook_id, json.loads(body)))
        return Delivery(204, webhook_id)


def notifying_service(
    engine: Engine, clock: FakeClock, wake: Any = None, *, cipher_key: str | None = None
) -> tuple[Service, list[tuple[EventType, str]]]:
    woken: list[tuple[EventType, str]] = []

    def record(event_type: EventType, run_id: str) -> None:
        woken.append((event_type, run_id))
        if wake is not None:
            wake()

    agent = Agent(name="mailer", model=ScriptedModel(WRITE_THEN_ANSWER), tools=gated_tools([]))
    service = Service(
        store=RunStore(engine, clock=clock, cipher=StateCipher(cipher_key)),
        registry=Registry([agent]),
        enqueue=lambda run_id, delay=None: None,
        notify=record,
        limits=Limits(retry_base_delay=0.01),
        clock=clock,
    )
    return service, woken


def outbox_rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(OUTBOX).order_by(OUTBOX.c.id)).all())


def test_a_suspension_records_its_notification_and_a_failed_wake_up_loses_nothing(
    engine: Engine, clock: FakeClock
) -> None:
    def broker_down() -> None:
        raise ConnectionError("broker unreachable")

    service, woken = notifying_service(engine, clock, wake=broker_down)
    run, _ = service.start_run("mailer", "go")
    # the earlier code reported lease_lost here, and the notification was gone
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    assert woken == [("run.waiting_for_approval", run.id)]
    [row] = outbox_rows(engine)
    assert (str(row.run_id), row.event_type, row.attempts) == (
        run.id, "run.waiting_for_approval", 0,
    )  # fmt: skip
    assert row.due_at is not None and row.delivered_at is None

    receiver = Receiver()
    report = deliver_due(service, URL, None, post=receiver)
    assert (report.delivered, report.failed) == (1, 0)
    [(webhook_id, event)] = receiver.sent
    assert webhook_id == row.webhook_id
    assert event["type"] == "run.waiting_for_approval"
    assert event["data"]["id"] == run.id and event["data"]["pending"]["calls"]
    # delivered: settled, and not sent again
    assert deliver_due(service, URL, None, post=receiver).delivered == 0
    assert len(receiver.sent) == 1
    [row] = outbox_rows(engine)
    assert (row.due_at, row.status_code, row.attempts) == (None, 204, 1)
    assert row.delivered_at is not None  # the record of the delivery: no event besides
    assert "notify_failed" not in [e.kind for e in service.store.events.read(run.id)]


def test_a_transition_that_does_not_happen_records_no_notification(
    engine: Engine, clock: FakeClock
) -> None:
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    assert service.store.transitions.claim(run.id, "first", service.limits.lease) is not None
    # a segment that lost its lease: its transition is refused, and so is its notification
    assert not service.store.transitions.finish(
        run.id,
        RunStatus.COMPLETED,
        owner="someone-else",
        events=[("completed", {})],
        notify="run.completed",
    )
    assert outbox_rows(engine) == []


def test_a_failed_delivery_is_retried_under_the_same_webhook_id_with_the_same_body(
    engine: Engine, clock: FakeClock
) -> None:
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    receiver = Receiver()
    receiver.fail_with = "receiver answered 503"
    assert deliver_due(service, URL, None, post=receiver).failed == 1
    [row] = outbox_rows(engine)
    assert row.attempts == 1 and row.due_at is not None and "503" in row.last_error
    assert deliver_due(service, URL, None, post=receiver).failed == 0  # not due yet
    # the run moves on meanwhile; the retry still sends what the first attempt built
    service.cancel(run.id, by=OPERATOR)
    clock.advance(seconds=3600)
    receiver.fail_with = None
    report = deliver_due(service, URL, None, post=receiver)
    assert report.delivered == 2  # the waiting event's retry, then the cancellation
    (first_id, first), (second_id, second) = receiver.sent
    assert first_id == row.webhook_id and first["data"]["status"] == "waiting_for_approval"
    assert second["type"] == "run.cancelled" and second_id != first_id
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert kinds.count("notify_failed") == 1
    assert all(row.delivered_at is not None for row in outbox_rows(engine))


def test_a_notification_is_given_up_after_the_last_attempt_and_kept(
    engine: Engine, clock: FakeClock
) -> None:
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    receiver = Receiver()
    receiver.fail_with = "could not reach the receiver"
    for _ in range(MAX_DELIVERIES):
        assert deliver_due(service, URL, None, post=receiver).failed == 1
        clock.advance(seconds=3600)
    assert deliver_due(service, URL, None, post=receiver).failed == 0
    [row] = outbox_rows(engine)
    assert (row.due_at, row.delivered_at, row.attempts) == (None, None, MAX_DELIVERIES)
    assert service.store.outbox.counts().given_up == 1


def test_two_dispatchers_claim_disjoint_rows(engine: Engine, clock: FakeClock) -> None:
    """Each claim takes what no other claim holds: the second finds nothing while the
    first holds every due row (its lease has not run out)."""
    service, _ = notifying_service(engine, clock)
    for i in range(3):
        run, _ = service.start_run("mailer", f"go {i}")
        service.run_segment(run.id, "w")
    first = service.store.outbox.claim(10, TAKE_FOR)
    assert len(first) == 3 and len({n.run_id for n in first}) == 3
    assert service.store.outbox.claim(10, TAKE_FOR) == []
    clock.advance(seconds=TAKE_FOR.total_seconds() + 1)  # the first dispatcher died
    again = service.store.outbox.claim(10, TAKE_FOR)
    assert sorted(n.id for n in again) == sorted(n.id for n in first)
    assert {n.attempts for n in again} == {2}


def test_a_runs_later_notification_waits_for_its_earlier_one(
    engine: Engine, clock: FakeClock
) -> None:
    """Issue 46: a run's ``completed`` must never reach the receiver before its
    ``waiting_for_approval``: only a run's first unsettled row can be claimed, while it
    is claimed, while it waits for its retry, until it is settled."""
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    service.cancel(run.id, by=OPERATOR)  # a second row for the run, due at once
    outbox = service.store.outbox
    [waiting] = outbox.claim(10, TAKE_FOR)
    assert waiting.event_type == "run.waiting_for_approval"
    assert outbox.claim(10, TAKE_FOR) == []  # the cancellation waits for it
    outbox.failed(waiting, "{}", "receiver answered 503", retry_in=30)
    assert outbox.claim(10, TAKE_FOR) == []  # and for its retry
    clock.advance(seconds=31)
    [retried] = outbox.claim(10, TAKE_FOR)
    assert retried.id == waiting.id
    outbox.delivered(retried, "{}", 204)
    [cancelled] = outbox.claim(10, TAKE_FOR)
    assert cancelled.event_type == "run.cancelled"


def test_given_up_the_earlier_notification_lets_the_later_go(
    engine: Engine, clock: FakeClock
) -> None:
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    service.cancel(run.id, by=OPERATOR)
    outbox = service.store.outbox
    [waiting] = outbox.claim(10, TAKE_FOR)
    outbox.failed(waiting, "{}", "answered 404; not retried", retry_in=None)
    [cancelled] = outbox.claim(10, TAKE_FOR)
    assert cancelled.event_type == "run.cancelled"


def test_a_claim_takes_no_more_than_asked(engine: Engine, clock: FakeClock) -> None:
    service, _ = notifying_service(engine, clock)
    for i in range(5):
        run, _ = service.start_run("mailer", f"go {i}")
        service.run_segment(run.id, "w")
    assert len(service.store.outbox.claim(2, TAKE_FOR)) == 2
    assert len(service.store.outbox.claim(10, TAKE_FOR)) == 3


def test_the_lag_of_delivered_notifications_is_read_back(engine: Engine, clock: FakeClock) -> None:
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    [taken] = service.store.outbox.claim(1, TAKE_FOR)
    clock.advance(seconds=2)
    service.store.outbox.delivered(taken, "{}", 204)
    assert service.store.outbox.recent_lags() == [2.0]
    assert service.stats().notification_lag == (2.0, 2.0)  # airlock stats, /metrics


def test_without_notifications_configured_nothing_is_recorded(engine: Engine) -> None:
    agent = Agent(name="mailer", model=ScriptedModel(WRITE_THEN_ANSWER), tools=gated_tools([]))
    service = Service(
        store=RunStore(engine),
        registry=Registry([agent]),
        enqueue=lambda run_id, delay=None: None,
    )
    run, _ = service.start_run("mailer", "go")
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    assert outbox_rows(engine) == []


def test_every_settling_transition_records_its_type(engine: Engine, clock: FakeClock) -> None:
    service, woken = notifying_service(engine, clock)
    first, _ = service.start_run("mailer", "go")
    service.run_segment(first.id, "w")
    digest = service.store.runs.require(first.id).turn_digest
    service.record_decision(
        first.id, DecisionBody(turn_digest=digest or "", decision="approve"), OPERATOR
    )
    assert service.run_segment(first.id, "w").outcome is Outcome.COMPLETED
    second, _ = service.start_run("mailer", "go")
    service.cancel(second.id, by=OPERATOR)
    types = [(row.event_type, str(row.run_id)) for row in outbox_rows(engine)]
    expected: list[tuple[str, str]] = [
        ("run.waiting_for_approval", first.id),
        ("run.completed", first.id),
        ("run.cancelled", second.id),
    ]
    assert types == expected
    assert woken == expected


def test_the_sealed_body_is_stored_sealed(engine: Engine, clock: FakeClock) -> None:
    service, _ = notifying_service(engine, clock, cipher_key=Fernet.generate_key().decode())
    run, _ = service.start_run("mailer", "secret input")
    service.run_segment(run.id, "w")
    receiver = Receiver()
    assert deliver_due(service, URL, None, post=receiver).delivered == 1
    [row] = outbox_rows(engine)
    assert row.body.startswith("fernet:") and "a@x" not in row.body
    sent: JsonValue = receiver.sent[0][1]
    assert isinstance(sent, dict) and sent["type"] == "run.waiting_for_approval"


def test_a_redirect_is_not_delivered_it_is_retried_and_visible(
    engine: Engine, clock: FakeClock
) -> None:
    """Issue 26, defect 13: a 3xx was settled as delivered and never tried again."""
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    http = HttpReceiver()
    with serving(http):
        http.status = 302
        assert deliver_due(service, http.url, None).failed == 1
        [row] = outbox_rows(engine)
        assert (row.delivered_at, row.status_code, row.attempts) == (None, 302, 1)
        assert row.due_at is not None and "redirect" in row.last_error
        assert (service.stats().notifications_due, service.stats().notifications_given_up) == (
            1, 0,
        )  # fmt: skip
        assert service.store.events.read(run.id)[-1].payload["status"] == 302
        clock.advance(seconds=3600)
        http.status = 204
        assert deliver_due(service, http.url, None).delivered == 1
    [row] = outbox_rows(engine)
    assert (row.due_at, row.status_code, row.attempts) == (None, 204, 2)
    assert row.delivered_at is not None


def test_a_client_error_is_given_up_at_once_not_delivered(engine: Engine, clock: FakeClock) -> None:
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    http = HttpReceiver()
    with serving(http):
        http.status = 404
        assert deliver_due(service, http.url, None).failed == 1
    [row] = outbox_rows(engine)
    assert (row.due_at, row.delivered_at, row.status_code, row.attempts) == (None, None, 404, 1)
    assert service.store.outbox.counts().given_up == 1
