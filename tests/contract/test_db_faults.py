"""A dropped database connection at each statement of a segment, in turn (PostgreSQL: the
server terminates the backend, as a failover or a pooler restart does). Killed before
the statement is sent, or after it ran (its commit made, its answer lost): either way
the segment goes on on a fresh connection, the run completes, its approved write runs
exactly once, and nothing is found in doubt."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from airlock.loop import Approve
from airlock.persistence.db import make_engine
from airlock.persistence.domain import CallStatus, RunStatus
from airlock.persistence.store import RetryPolicy, RunStore
from airlock.workers.service import Limits, Outcome, Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from tests.db_faults import ConnectionKiller
from tests.unit.agents import Recorder, answer, call, calls, make_agent

pytestmark = pytest.mark.postgres

QUICK = RetryPolicy(seconds=10, result_seconds=10, first_delay=0.005, max_delay=0.05)
STEPS = [
    calls(call("lookup", q="42")),
    calls(call("send_email", to="a@example.com", body="hi")),
    answer("done"),
]


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture
def killer(postgres_url: str) -> Iterator[ConnectionKiller]:
    killer = ConnectionKiller(postgres_url, lambda _n, _s: None).install()
    yield killer
    killer.uninstall()


def story(engine: Engine, killer: ConnectionKiller, pick: int, where: str) -> Recorder:
    """A run to its end, the statement number ``pick`` of its two segments (counted
    together) killed ``where``; the decision between them is made on a sound connection."""
    recorder = Recorder()
    service = Service(
        store=RunStore(engine, retry=QUICK),
        registry=Registry([make_agent(STEPS, recorder)]),
        enqueue=lambda _run, _delay=None: None,
        limits=Limits(retry_base_delay=0.01),
    )
    run, _ = service.start_run("mailer", "Mail a")
    killer.arm(lambda n, _s: where if n == pick else None)
    assert service.run_segment(run.id, "first").outcome is Outcome.SUSPENDED
    killer.disarm()
    digest = service.store.runs.require(run.id).turn_digest or ""
    body = DecisionBody(turn_digest=digest, decision="approve")
    service.record_decision(run.id, body, Principal.operator("ops"))
    killer.arm(reset=False)
    assert service.run_segment(run.id, "second").outcome is Outcome.COMPLETED
    killer.disarm()
    done = service.store.runs.require(run.id)
    assert (done.status, done.output) == (RunStatus.COMPLETED, "done")
    ledger = service.store.ledger.entries(run.id)
    assert [e.status for e in ledger] == [CallStatus.SUCCEEDED, CallStatus.SUCCEEDED]
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert "failed" not in kinds and "retry" not in kinds
    return recorder


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_dropped_connection_at_any_statement_of_a_segment_loses_nothing(
    pg_engine: Engine, killer: ConnectionKiller, where: str
) -> None:
    story(pg_engine, killer, -1, where)  # none killed: how many statements there are
    statements = killer.count
    assert statements >= 6  # claim, suspend; claim, start, result, finish at least
    for pick in range(statements):
        killer.killed.clear()
        recorder = story(pg_engine, killer, pick, where)
        assert [name for name, _, _ in recorder.calls] == ["send_email"], pick
        assert len(killer.killed) == 1, pick


def test_a_dropped_connection_around_a_write_ahead_checkpoint_loses_nothing(
    pg_engine: Engine, killer: ConnectionKiller
) -> None:
    """A write a policy approves runs in the segment that asked for it, after the
    write-ahead checkpoint: each of that segment's statements killed in turn, both ways."""

    def approve_all(_tool: object, _arguments: object) -> Approve:
        return Approve()

    def one_segment(pick: int, where: str) -> list[str]:
        recorder = Recorder()
        service = Service(
            store=RunStore(pg_engine, retry=QUICK),
            registry=Registry([make_agent(STEPS, recorder, policy=approve_all)]),
            enqueue=lambda _run, _delay=None: None,
            limits=Limits(retry_base_delay=0.01),
        )
        run, _ = service.start_run("mailer", "Mail a")
        killer.arm(lambda n, _s: where if n == pick else None)
        assert service.run_segment(run.id, "only").outcome is Outcome.COMPLETED
        killer.disarm()
        done = service.store.runs.require(run.id)
        assert (done.status, done.output) == (RunStatus.COMPLETED, "done")
        return [name for name, _, _ in recorder.calls]

    one_segment(-1, "before")
    statements = killer.count
    assert statements >= 4  # claim, checkpoint, start, result, finish
    kinds = set()
    for where in ("before", "after"):
        for pick in range(statements):
            killer.killed.clear()
            assert one_segment(pick, where) == ["send_email"], (where, pick)
            assert len(killer.killed) == 1
            kinds.add(killer.killed[0][1])
    assert any("tool_calls" in kind for kind in kinds)
