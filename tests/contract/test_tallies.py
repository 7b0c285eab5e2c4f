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
        conn.execute(text("UPDATE run_tallies SET queued = queued + 7, failed = failed - 1"))
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


def interleave(engine: Engine, firsts: list[str], second: str, statuses: list[str]) -> None:
    """Runs of one tally row, with ``statuses``: the first's transaction moves the first
    run to each of ``firsts`` in turn, the second's moves the second run to ``second``,
    begun after the first's first move and seen waiting on it, committed after it."""
    ids = same_slot_ids()
    at = datetime.now(UTC)
    with engine.begin() as conn:
        for rid, status in zip(ids, statuses, strict=True):
            conn.execute(sa.insert(RUNS).values(
                id=rid, agent="mailer", status=status, input="x", metadata={}, iterations=0,
                prompt_tokens=0, completion_tokens=0, attempts=0, event_seq=0, version=1,
                created_at=at, updated_at=at))  # fmt: skip
    move = sa.update(RUNS).values(updated_at=at)
    first, other = engine.connect(), engine.connect()
    try:
        first.begin()
        first.execute(move.where(RUNS.c.id == ids[0]).values(status=firsts[0]))
        other_pid = other.execute(text("SELECT pg_backend_pid()")).scalar_one()
        other.commit()  # the next statement begins its transaction
        done = threading.Event()

        def run_second() -> None:
            other.execute(move.where(RUNS.c.id == ids[1]).values(status=second))
            other.commit()
            done.set()

        worker = threading.Thread(target=run_second)
        worker.start()
        waiting = text("SELECT count(*) FROM pg_locks WHERE pid = :pid AND NOT granted")
        with engine.connect() as probe:
            wait_for("the second transition to wait on the tally row",
                     lambda: probe.execute(waiting, {"pid": other_pid}).scalar_one() > 0,
                     timeout=10)  # fmt: skip
        for status in firsts[1:]:  # no deadlock: the second holds no tally row
            first.execute(move.where(RUNS.c.id == ids[0]).values(status=status))
        assert not done.is_set()
        first.commit()
        worker.join(10)
        assert done.is_set()
    finally:
        first.close()
        other.close()


def test_two_transitions_committing_at_once_lose_no_count(pg_engine: Engine) -> None:
    """Two runs of one tally row each move queued -> running in its own transaction:
    the second's UPDATE waits on the row the first's trigger holds, and adds to what the
    first committed (neither count is lost)."""
    repo = RunStore(pg_engine)
    interleave(pg_engine, ["running"], "running", ["queued", "queued"])
    tallied = exact(repo)
    assert tallied[RunStatus.RUNNING] == 2 and tallied[RunStatus.QUEUED] == 0


def test_a_transaction_that_moves_its_run_twice_waits_on_no_one(pg_engine: Engine) -> None:
    """As a suspension that standing grants release: running -> waiting -> queued in one
    transaction, while a decision moves another run of the same tally row waiting ->
    queued. Each holds one tally row (its run's slot's) however many statements it makes,
    so neither waits on the other in a cycle (with a row per status, the first would
    hold 'waiting' and want 'queued', the second hold 'queued' and want 'waiting')."""
    repo = RunStore(pg_engine)
    statuses = ["running", "waiting_for_approval"]
    interleave(pg_engine, ["waiting_for_approval", "queued"], "queued", statuses)
    tallied = exact(repo)
    assert tallied[RunStatus.QUEUED] == 2 and tallied[RunStatus.WAITING_FOR_APPROVAL] == 0
