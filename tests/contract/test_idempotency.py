"""Idempotency keys are their caller's own (issue 26, defect 7), on both databases: the
same key from another caller is another run; the same key with another request is
refused, never answered with the first run; of two creates racing with one key, the
unique (caller, key) decides, forced at the boundary between the lookup and the insert."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from airlock.persistence.domain import Run
from airlock.persistence.store import RunStore
from airlock.persistence.store.sql import RUNS
from airlock.workers.service import IdempotencyMismatchError, Service
from airlock.workers.service.registry import Registry


@pytest.fixture
def service(engine: Engine) -> Iterator[Service]:
    enqueued: list[str] = []
    yield Service(
        store=RunStore(engine),
        registry=Registry.from_paths("tests.integration.agents:AGENTS"),
        enqueue=lambda run_id, delay=None: enqueued.append(run_id),
    )


def runs(service: Service) -> int:
    with service.store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(RUNS)).scalar_one())


def test_a_key_is_its_callers_own(service: Service) -> None:
    first, made = service.start_run("w1", "refund 17", idempotency_key="ticket-991", caller="a")
    other, made_other = service.start_run(
        "payments", "pay INV-7", idempotency_key="ticket-991", requested_by="carol", caller="b"
    )
    assert made and made_other and other.id != first.id
    assert (other.agent, other.input, other.requested_by) == ("payments", "pay INV-7", "carol")
    again, made_again = service.start_run(
        "w1", "refund 17", idempotency_key="ticket-991", caller="a"
    )
    assert not made_again and again.id == first.id


@pytest.mark.parametrize(
    "change",
    [
        {"agent": "payments"},
        {"input": "refund 18"},
        {"metadata": {"ticket": 2}},
        {"requested_by": "mallory"},
    ],
)
def test_a_key_reused_for_another_request_is_refused(
    service: Service, change: dict[str, Any]
) -> None:
    request: dict[str, Any] = {"agent": "w1", "input": "refund 17", "metadata": {"ticket": 1}}
    first, _ = service.start_run(**request, idempotency_key="k", caller="a")
    with pytest.raises(IdempotencyMismatchError, match=first.id):
        service.start_run(**(request | change), idempotency_key="k", caller="a")
    assert runs(service) == 1


def lookup_misses_the_competitor(
    monkeypatch: pytest.MonkeyPatch, service: Service, competitor: dict[str, Any]
) -> list[Run]:
    """The next create's lookup sees no run, and the competitor's create (with the same
    caller and key) commits right after it, before that create's insert."""
    store = service.store.runs
    lookup = store.by_idempotency_key
    made: list[Run] = []

    def miss(caller: str, key: str) -> Run | None:
        found = lookup(caller, key)
        if not made:
            monkeypatch.setattr(store, "by_idempotency_key", lookup)
            run, created = service.start_run(**competitor, idempotency_key=key, caller=caller)
            assert created and found is None
            made.append(run)
        return found

    monkeypatch.setattr(store, "by_idempotency_key", miss)
    return made


def test_two_racing_creates_with_one_key_and_one_request_make_one_run(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    request: dict[str, Any] = {"agent": "w1", "input": "refund 17"}
    made = lookup_misses_the_competitor(monkeypatch, service, request)
    run, created = service.start_run(**request, idempotency_key="k", caller="a")
    assert made and not created and run.id == made[0].id
    assert runs(service) == 1
    assert [e.kind for e in service.store.events.read(run.id)] == ["request"]


def test_a_racing_create_with_another_request_is_refused(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = lookup_misses_the_competitor(monkeypatch, service, {"agent": "w1", "input": "one"})
    with pytest.raises(IdempotencyMismatchError):
        service.start_run("w1", "two", idempotency_key="k", caller="a")
    assert made and runs(service) == 1
