"""Real threads, real connections: guarded transitions hold under contention
(PostgreSQL under READ COMMITTED, SQLite in WAL mode)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from sqlalchemy import Engine

from persistence.db import make_engine
from persistence.domain import RunStatus
from persistence.store import RunStore
from tests.contract.helpers import APPROVE, DENY, LEASE, waiting_run

T = TypeVar("T")
WORKERS = 20


@pytest.fixture
def pooled_engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url, pool_size=WORKERS, max_overflow=5)
    yield engine
    engine.dispose()


@pytest.fixture
def repo(pooled_engine: Engine) -> RunStore:
    return RunStore(pooled_engine)


def all_at_once(n: int, work: Callable[[int], T]) -> list[T]:
    barrier = threading.Barrier(n)

    def go(i: int) -> T:
        barrier.wait()
        return work(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


def test_twenty_concurrent_claims_one_winner(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    results = all_at_once(
        WORKERS, lambda i: (f"w{i}", repo.transitions.claim(run.id, f"w{i}", LEASE))
    )
    winners = [owner for owner, claim in results if claim is not None]
    assert len(winners) == 1
    final = repo.runs.require(run.id)
    assert final.lease_owner == winners[0]
    assert final.attempts == 1 and final.version == run.version + 1


def test_twenty_concurrent_creates_with_one_idempotency_key_make_one_run(
    repo: RunStore,
) -> None:
    """Those that miss the first run when they look lose the insert on the unique key,
    and answer with the run that won."""

    def create(i: int) -> tuple[str, bool]:
        run, created = repo.runs.create(
            "mailer", f"x{i}", idempotency_key="once", first_event=("request", {})
        )
        return run.id, created

    results = all_at_once(WORKERS, create)
    assert sum(created for _, created in results) == 1
    assert len({run_id for run_id, _ in results}) == 1
    (run_id,) = {run_id for run_id, _ in results}
    assert [e.kind for e in repo.events.read(run_id)] == ["request"]
    assert repo.queries.count_by_status()[RunStatus.QUEUED] == 1


def test_twenty_concurrent_decisions_one_transition(repo: RunStore) -> None:
    run, state = waiting_run(repo)

    def decide(i: int) -> str:
        body = APPROVE if i % 2 else DENY
        return repo.decisions.record_decision(
            run.id, state.turn_digest, body, approver=f"a{i}"
        ).result

    results = Counter(all_at_once(WORKERS, decide))
    assert results["recorded"] == 1
    assert results["recorded"] + results["duplicate"] + results["conflict"] == WORKERS
    assert results["duplicate"] >= 1 and results["conflict"] >= 1
    after = repo.runs.require(run.id)
    assert after.status is RunStatus.QUEUED
    assert after.version == run.version + 1  # exactly one transition happened
    assert repo.decisions.decision_for(run.id, state.turn_digest) is not None


def test_concurrent_event_appends_stay_gap_free(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    per_writer = 10

    def write(i: int) -> list[int]:
        return [
            repo.events.append_event(run.id, "tool", {"writer": i, "n": n})
            for n in range(per_writer)
        ]

    seqs = [s for batch in all_at_once(WORKERS, write) for s in batch]
    assert sorted(seqs) == list(range(1, WORKERS * per_writer + 1))
    assert [e.seq for e in repo.events.read(run.id, limit=10_000)] == sorted(seqs)
