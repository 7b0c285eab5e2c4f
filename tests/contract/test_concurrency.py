"""Real threads, real connections: guarded transitions hold under contention
(PostgreSQL under READ COMMITTED, SQLite in WAL mode)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from pydantic import JsonValue
from sqlalchemy import Engine, event

from airlock.persistence.db import make_engine
from airlock.persistence.domain import DecisionOutcome, RunStatus
from airlock.persistence.store import Event, RunStore
from tests.contract.helpers import APPROVE, DENY, LEASE, waiting_run

T = TypeVar("T")
WORKERS = 20
Body = dict[str, JsonValue]


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


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


# -- approvals toward a quorum ------------------------------------------------------------


def vote(repo: RunStore, run_id: str, digest: str, principal: str, quorum: int) -> DecisionOutcome:
    def audit(approved_by: tuple[str, ...], reached: bool, replaced: bool) -> list[Event]:
        return [("decision" if reached else "approval", {"approved_by": list(approved_by)})]

    return repo.decisions.approve(
        run_id,
        digest,
        APPROVE,
        effect={"call-1": {"approve": {}}},
        principal=principal,
        identity=f"test:{principal}",
        auth={"method": "test"},
        quorum=quorum,
        audit=audit,
    )


def test_twenty_concurrent_approvals_reach_a_quorum_once(repo: RunStore) -> None:
    """Five principals, four requests each, a quorum of three: exactly one approval
    decides, with exactly three principals counted, and the events stay gap-free."""
    run, state = waiting_run(repo)
    results = all_at_once(
        WORKERS, lambda i: vote(repo, run.id, state.turn_digest, f"p{i % 5}", quorum=3)
    )
    tally = Counter(r.result for r in results)
    assert tally["recorded"] == 1, tally
    assert set(tally) <= {"recorded", "partial", "duplicate"}
    (won,) = [r for r in results if r.result == "recorded"]
    assert len(won.approved_by) == 3 == len(set(won.approved_by))
    after = repo.runs.require(run.id)
    assert after.status is RunStatus.QUEUED and after.version == run.version + 1
    approvals = repo.decisions.approvals(run.id, state.turn_digest)
    assert 3 <= len(approvals) <= 5 and len({a.principal for a in approvals}) == len(approvals)
    kinds = [(e.seq, e.kind) for e in repo.events.read(run.id)]
    assert [k for _, k in kinds].count("decision") == 1
    assert [s for s, _ in kinds] == list(range(1, len(kinds) + 1))


@contextmanager
def held_after_insert(
    engine: Engine, table: str
) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The first INSERT into ``table`` waits, inside its transaction, until the second
    yielded event is set (the first is set once it waits): the statement boundary
    where a second approver races the first."""
    release, held = threading.Event(), threading.Event()

    def hold(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if (
            statement.lstrip().upper().startswith(f"INSERT INTO {table.upper()}")
            and not held.is_set()
        ):
            held.set()
            assert release.wait(10)

    event.listen(engine, "after_cursor_execute", hold)
    try:
        yield held, release
    finally:
        release.set()
        event.remove(engine, "after_cursor_execute", hold)


def test_an_approval_waits_for_the_one_before_it_to_commit(
    repo: RunStore, pooled_engine: Engine
) -> None:
    """Alice's approval is held right after its row is written, its transaction open.
    Bob's, sent meanwhile, waits on the run's row instead of counting without hers,
    then counts both and decides. (Without the lock each would count only itself, and
    a quorum of two would never be reached.)"""
    run, state = waiting_run(repo)
    hold = held_after_insert(pooled_engine, "approvals")
    with hold as (held, release), ThreadPoolExecutor(2) as pool:
        alice = pool.submit(vote, repo, run.id, state.turn_digest, "alice", 2)
        wait_until(held.is_set)
        bob = pool.submit(vote, repo, run.id, state.turn_digest, "bob", 2)
        done, _ = wait([bob], timeout=0.5)  # bob cannot finish while alice holds the row
        assert not done
        release.set()
        assert alice.result().result == "partial"
        decided = bob.result()
    assert decided.result == "recorded" and decided.approved_by == ("alice", "bob")
    assert repo.runs.require(run.id).status is RunStatus.QUEUED


def test_a_deny_sent_during_an_open_approval_waits_and_then_wins(
    repo: RunStore, pooled_engine: Engine
) -> None:
    run, state = waiting_run(repo)
    with (
        held_after_insert(pooled_engine, "approvals") as (held, release),
        ThreadPoolExecutor(2) as pool,
    ):
        alice = pool.submit(vote, repo, run.id, state.turn_digest, "alice", 2)
        wait_until(held.is_set)
        deny = pool.submit(
            repo.decisions.record_decision, run.id, state.turn_digest, DENY, approver="bob"
        )
        done, _ = wait([deny], timeout=0.5)
        assert not done
        release.set()
        assert alice.result().result == "partial"
        assert deny.result().result == "recorded"
    late = vote(repo, run.id, state.turn_digest, "carol", 2)
    assert late.result == "conflict" and late.stored is not None
    assert late.stored.decision == DENY
