"""Runs per status are kept by the database's triggers (migration 0011) in the
transaction of every write: exact after every transition, on SQLite and PostgreSQL,
after the migration on a database that already holds runs, and when two transitions of
different runs commit at once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine, text

from airlock.persistence.db import make_engine
from airlock.persistence.domain import RunStatus
from airlock.persistence.migrate import upgrade
from airlock.persistence.models import UTCDateTime
from airlock.persistence.store import RunStore
from airlock.persistence.store.sql import RUNS
from airlock.workers.testing import wait_for
from tests.conftest import FakeClock
from tests.contract.helpers import APPROVE, LEASE, suspended_state, waiting_run


@pytest.fixture
def repo(engine: Engine, clock: FakeClock) -> RunStore:
    return RunStore(engine, clock=clock)


def counted(engine: Engine) -> dict[RunStatus, int]:
    """The runs per status, counted (what the tallies must say)."""
    counts = dict.fromkeys(RunStatus, 0)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, count(*) FROM agent_runs GROUP BY status"))
        counts.update({RunStatus(status): int(n) for status, n in rows})
    return counts


def exact(repo: RunStore) -> dict[RunStatus, int]:
    tallied = repo.queries.count_by_status()
    assert tallied == counted(repo.engine)
    return tallied


def test_tallies_are_exact_after_every_transition(repo: RunStore, clock: FakeClock) -> None:
    assert exact(repo) == dict.fromkeys(RunStatus, 0)
    run, _ = repo.runs.create("mailer", "x")  # create
    assert exact(repo)[RunStatus.QUEUED] == 1
    assert repo.runs.create("mailer", "x", idempotency_key="k")[1]
    assert not repo.runs.create("mailer", "x", idempotency_key="k")[1]  # the same run
    assert exact(repo)[RunStatus.QUEUED] == 2
    assert repo.transitions.claim(run.id, "w1", LEASE) is not None  # claim
    assert exact(repo)[RunStatus.RUNNING] == 1
    state = suspended_state(run.id)
    assert repo.transitions.suspend(run.id, "w1", state, clock() + timedelta(minutes=5))
    assert exact(repo)[RunStatus.WAITING_FOR_APPROVAL] == 1  # suspend
    assert repo.decisions.record_decision(run.id, state.turn_digest, APPROVE).result == "recorded"
    assert exact(repo)[RunStatus.QUEUED] == 2  # decide
    repo.transitions.claim(run.id, "w2", LEASE)
    assert repo.transitions.finish(run.id, RunStatus.FAILED, owner="w2", error="boom")  # fail
    assert exact(repo)[RunStatus.FAILED] == 1
    assert repo.transitions.retry(run.id)  # retry
    assert exact(repo)[RunStatus.FAILED] == 0
    repo.transitions.claim(run.id, "w3", LEASE)
    assert repo.transitions.finish(run.id, RunStatus.COMPLETED, owner="w3")  # complete
    assert exact(repo)[RunStatus.COMPLETED] == 1
    assert not repo.transitions.finish(run.id, RunStatus.COMPLETED, owner="w3")  # lost: none
    other, _ = repo.runs.create("mailer", "y")
    assert repo.transitions.cancel(other.id)  # cancel
    assert exact(repo)[RunStatus.CANCELLED] == 1
    waits, _ = repo.runs.create("mailer", "z")
    repo.transitions.claim(waits.id, "w4", LEASE)
    waiting_state = suspended_state(waits.id)
    repo.transitions.suspend(waits.id, "w4", waiting_state, clock() + timedelta(minutes=5))
    clock.advance(minutes=6)
    assert repo.transitions.expire(waits.id, waiting_state.turn_digest)  # expire
    assert exact(repo)[RunStatus.CANCELLED] == 2
    clock.advance(days=40)
    assert repo.retention.purge(timedelta(days=30), batch_size=2) == 3  # purge
    assert exact(repo) == {**dict.fromkeys(RunStatus, 0), RunStatus.QUEUED: 1}


def test_expired_leases_requeued_and_failed_are_counted(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "dead", LEASE)
    clock.advance(seconds=31)
    assert repo.transitions.reclaim_expired_leases(max_attempts=2).requeued == (run.id,)
    assert exact(repo)[RunStatus.QUEUED] == 1
    repo.transitions.claim(run.id, "dead-again", LEASE)
    clock.advance(seconds=31)
    assert repo.transitions.reclaim_expired_leases(max_attempts=2).failed == (run.id,)
    assert exact(repo)[RunStatus.FAILED] == 1


def test_a_write_that_changes_no_status_leaves_the_tallies(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "w1", LEASE)
    before = repo.queries.waiting_mark()
    assert repo.transitions.renew_lease(run.id, "w1", LEASE)
    assert exact(repo)[RunStatus.RUNNING] == 1
    assert repo.queries.waiting_mark() == before  # a running run's write: not the queue's


def test_a_waiting_runs_write_changes_the_queues_mark(repo: RunStore, clock: FakeClock) -> None:
    run, _ = waiting_run(repo)
    before = repo.queries.waiting_mark()
    with repo.engine.begin() as conn:  # as an approval toward a quorum notes itself
        conn.execute(sa.update(RUNS).where(RUNS.c.id == uuid.UUID(run.id)).values(
            updated_at=clock(), event_seq=RUNS.c.event_seq + 1))  # fmt: skip
    after = repo.queries.waiting_mark()
    assert after.count == before.count == 1 and after != before


def test_a_recount_repairs_the_tallies(repo: RunStore) -> None:
    repo.runs.create("mailer", "x")
    waiting_run(repo)
    mark = repo.queries.waiting_mark()
    with repo.engine.begin() as conn:
        conn.execute(text("UPDATE run_tallies SET runs = runs + 7"))
    assert repo.queries.count_by_status() != counted(repo.engine)
    repo.tallies.recount()
    assert exact(repo)[RunStatus.WAITING_FOR_APPROVAL] == 1
    assert repo.queries.waiting_mark().count == 1 and repo.queries.waiting_mark() != mark


def test_the_migration_counts_the_runs_already_stored(db_url: str, engine: Engine) -> None:
    """Upgraded from 0010 on a database that holds runs of every status."""
    from alembic import command

    from airlock.persistence.migrate import alembic_config

    command.downgrade(alembic_config(db_url), "0010")
    at = datetime(2026, 12, 1, tzinfo=UTC)
    statuses = [s.value for s in RunStatus] * 3 + ["waiting_for_approval"] * 4
    names: tuple[str, ...] = ("agent", "status", "input", "metadata", "iterations")
    names += ("prompt_tokens", "completion_tokens", "attempts", "event_seq", "version")
    runs = sa.table(
        "agent_runs",
        *(sa.column(c) for c in names),
        sa.column("id", sa.Uuid()),
        sa.column("created_at", UTCDateTime()),
        sa.column("updated_at", UTCDateTime()),
    )
    with engine.begin() as conn:
        for i, status in enumerate(statuses):
            conn.execute(runs.insert().values(
                id=uuid.uuid4(), agent="mailer", status=status, input="x", metadata="{}",
                iterations=0, prompt_tokens=0, completion_tokens=0, attempts=0, event_seq=i,
                version=1, created_at=at, updated_at=at + timedelta(seconds=i)))  # fmt: skip
    upgrade(db_url)
    repo = RunStore(engine)
    assert exact(repo)[RunStatus.WAITING_FOR_APPROVAL] == 7
    assert sum(exact(repo).values()) == len(statuses)
    mark = repo.queries.waiting_mark()
    assert mark.count == 7
    assert mark.changed_at == at + timedelta(seconds=len(statuses) - 1)


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


def same_slot_ids() -> tuple[uuid.UUID, uuid.UUID]:
    """Two run ids whose tallies share a row on PostgreSQL (the last byte, mod 16)."""
    a = uuid.uuid4()
    while True:
        b = uuid.uuid4()
        if b.bytes[15] % 16 == a.bytes[15] % 16:
            return a, b


def test_two_transitions_committing_at_once_lose_no_count(pg_engine: Engine) -> None:
    """Two runs of one tally row each move queued -> running in its own transaction:
    the second's UPDATE waits on the row the first's trigger holds, and adds to what the
    first committed (neither count is lost)."""
    repo = RunStore(pg_engine)
    ids = same_slot_ids()
    at = datetime.now(UTC)
    with pg_engine.begin() as conn:  # two runs queued with the chosen ids
        for rid in ids:
            conn.execute(sa.insert(RUNS).values(
                id=rid, agent="mailer", status="queued", input="x", metadata={}, iterations=0,
                prompt_tokens=0, completion_tokens=0, attempts=0, event_seq=0, version=1,
                created_at=at, updated_at=at))  # fmt: skip
    assert exact(repo)[RunStatus.QUEUED] == 2
    move = sa.update(RUNS).values(status="running", updated_at=at)
    first, second = pg_engine.connect(), pg_engine.connect()
    try:
        first.begin()
        first.execute(move.where(RUNS.c.id == ids[0]))  # holds the tally rows
        second_pid = second.execute(text("SELECT pg_backend_pid()")).scalar_one()
        second.commit()  # the next statement begins its transaction
        done = threading.Event()

        def run_second() -> None:
            second.execute(move.where(RUNS.c.id == ids[1]))
            second.commit()
            done.set()

        worker = threading.Thread(target=run_second)
        worker.start()
        waiting = text("SELECT count(*) FROM pg_locks WHERE pid = :pid AND NOT granted").bindparams(
            pid=second_pid
        )
        with pg_engine.connect() as probe:
            wait_for("the second transition to wait on the tally row",
                     lambda: probe.execute(waiting).scalar_one() > 0, timeout=10)  # fmt: skip
        assert not done.is_set()
        first.commit()
        worker.join(10)
        assert done.is_set()
    finally:
        first.close()
        second.close()
    tallied = exact(repo)
    assert tallied[RunStatus.RUNNING] == 2 and tallied[RunStatus.QUEUED] == 0
