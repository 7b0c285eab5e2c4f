"""The MCP gateway's held calls (``store.gateway``): two identical calls make one held
call (so one run), also when they race on two connections; its result is marked
returned once, after which an identical call is a new one."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import HeldCall, RunStore
from airlock.persistence.store.sql import MCP_GATEWAY_CALLS
from airlock.workers.testing import wait_for

DIGEST = "d" * 64


def test_identical_calls_attach_until_the_result_is_returned(engine: Engine) -> None:
    calls = RunStore(engine).gateway
    first = calls.open(DIGEST, "api:ann", "bank", "bank__transfer")
    again = calls.open(DIGEST, "api:ann", "bank", "bank__transfer")
    assert first.created and not again.created and again.id == first.id
    other = calls.open("e" * 64, "api:ann", "bank", "bank__transfer")
    assert other.id != first.id
    assert calls.figures().held == [("bank", "bank__transfer", 2)]

    assert calls.close(first.id) is True
    assert calls.close(first.id) is False  # returned once: the second mark changes nothing
    figures = calls.figures()
    assert figures.held == [("bank", "bank__transfer", 1)]
    assert figures.returned == [("bank", "bank__transfer", 1)]
    assert len(figures.waits) == 1 and figures.waits[0] >= 0
    anew = calls.open(DIGEST, "api:ann", "bank", "bank__transfer")
    assert anew.created and anew.id != first.id


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


def test_two_instances_racing_open_one_call(pg_engine: Engine) -> None:
    """Forced interleaving on PostgreSQL: one instance's insert of the open key is not
    committed yet when the other opens the same call; the other waits on the unique key
    and then finds the first's row (it makes no second)."""
    calls = RunStore(pg_engine).gateway
    theirs = uuid.uuid4()
    found: list[HeldCall] = []
    row = {
        "id": theirs, "open_key": DIGEST, "digest": DIGEST, "principal": "api:ann",
        "server": "bank", "tool": "bank__transfer", "created_at": datetime.now(UTC),
    }  # fmt: skip
    with pg_engine.connect() as first:
        transaction = first.begin()
        first.execute(MCP_GATEWAY_CALLS.insert().values(row))
        racer = threading.Thread(
            target=lambda: found.append(calls.open(DIGEST, "api:ann", "bank", "bank__transfer"))
        )
        racer.start()
        wait_for("the second open to wait on the first's key", lambda: _waiting(pg_engine))
        assert found == []
        transaction.commit()
    racer.join(30)
    assert [(h.id, h.created) for h in found] == [(str(theirs), False)]
    with pg_engine.connect() as c:
        count = c.execute(text("SELECT count(*) FROM mcp_gateway_calls")).scalar()
    assert count == 1


def _waiting(engine: Engine) -> bool:
    """Whether a statement of this database waits on a lock now."""
    with engine.connect() as c:
        waiting = c.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"
            )
        ).scalar()
    return bool(waiting)


def test_a_call_whose_run_is_asking_is_withdrawn_later_and_a_waiting_one_now(
    engine: Engine,
) -> None:
    """``tasks/cancel`` (``Gateway.withdraw``): while the run's first segment asks (it
    runs and never suspended: in flight, or its worker lost until its lease expires) the
    client is told to withdraw again (no false acknowledgement, no wait in the API's
    threads); once the run waits it is withdrawn, and the identical call is new."""
    from airlock.workers.mcp.gateway import Gateway, WithdrawLaterError
    from airlock.workers.service.principals import Principal
    from tests.contract.test_service import make_service

    service, _ = make_service(engine)
    ann = Principal.trusted("ann")
    run, _ = service.start_run("w1", "x", requested_by="ann", caller=ann.key)
    held = service.store.gateway.open(DIGEST, ann.key, "bank", "bank__transfer")
    service.store.gateway.bind(held.id, run.id)
    assert service.store.transitions.claim(run.id, "w", timedelta(seconds=30)) is not None
    gateway = Gateway(service, [], wait=1)
    with pytest.raises(WithdrawLaterError, match="asking for approval right now"):
        gateway.withdraw(ann, held.id)
    assert service.store.runs.require(run.id).status is RunStatus.RUNNING
    assert service.store.gateway.open(DIGEST, ann.key, "bank", "bank__transfer").id == held.id

    assert service.store.transitions.requeue(run.id, "w")  # its lease expired
    service.run_segment(run.id, "w")
    assert service.store.runs.require(run.id).status is RunStatus.WAITING_FOR_APPROVAL
    assert gateway.withdraw(ann, held.id) is True
    assert service.store.runs.require(run.id).status is RunStatus.CANCELLED
    assert service.store.gateway.open(DIGEST, ann.key, "bank", "bank__transfer").id != held.id


def test_a_run_of_the_gateways_agent_is_not_retried(engine: Engine) -> None:
    """Its client was answered how it ended ("not executed"): a retry would make the call
    after all, and the client, told it was not made, asks again."""
    from airlock.loop import Agent, ScriptedModel
    from airlock.workers.service import ConflictError
    from airlock.workers.service.principals import Principal
    from tests.contract.test_service import make_service
    from tests.integration.agents import w1

    service, _ = make_service(engine, Agent(name="mcp", model=ScriptedModel(w1()), tools=[]))
    run, _ = service.start_run("mcp", "x")
    assert service.store.transitions.finish(
        run.id, RunStatus.FAILED, expected=(RunStatus.QUEUED,), error="worker lost"
    )
    with pytest.raises(ConflictError, match="not retried"):
        service.retry(run.id, by=Principal.trusted("ops"))
    assert service.store.runs.require(run.id).status is RunStatus.FAILED
