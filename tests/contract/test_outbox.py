"""Notifications go through a transactional outbox (issue 13, defect 10), on both databases.

A notification is recorded by the statement of the transition that causes it, so it
exists exactly when the transition happened; a failed wake-up leaves it due, and a
deliverer sends it later under one webhook-id however many attempts it takes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
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
    assert [e.kind for e in service.store.events.read(run.id)][-1] == "notified"


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
    assert kinds.count("notify_failed") == 1 and kinds.count("notified") == 2


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


def test_two_deliverers_racing_send_a_notification_once(
    engine: Engine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second deliverer runs entirely between the first one's SELECT of what is due
    and its UPDATE that takes the row."""
    service, _ = notifying_service(engine, clock)
    run, _ = service.start_run("mailer", "go")
    service.run_segment(run.id, "w")
    receiver = Receiver()
    outbox = service.store.outbox
    due = outbox.due
    raced: list[int] = []

    def other_deliverer_first(limit: int = 100) -> list[int]:
        ids = due(limit)
        if not raced:
            raced.append(0)  # the other deliverer's own SELECT is not raced
            raced[0] = deliver_due(service, URL, None, post=receiver).delivered
        return ids

    monkeypatch.setattr(outbox, "due", other_deliverer_first)
    assert deliver_due(service, URL, None, post=receiver).delivered == 0
    assert raced == [1] and len(receiver.sent) == 1


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
