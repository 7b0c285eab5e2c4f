"""The MCP gateway's held calls (``store.gateway``): two identical calls make one held
call (so one run), also when they race on two connections; its result is marked
returned once, after which an identical call is a new one."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, text

from airlock.persistence.db import make_engine
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
