"""What the live streams read of the store, on SQLite and PostgreSQL alike: the heads of
many runs in one statement, the events of many runs each after its own cursor, and
the waiting queue's mark."""

from __future__ import annotations

import uuid

from sqlalchemy import Engine, update

from airlock.persistence.domain import RunStatus, StreamHead
from airlock.persistence.store import RunStore
from airlock.persistence.store.sql import RUNS
from tests.conftest import FakeClock


def runs_with_events(repo: RunStore, counts: list[int]) -> list[str]:
    ids = []
    for n in counts:
        run, _ = repo.runs.create("mailer", "x", first_event=("request", {"n": 1}))
        for i in range(2, n + 1):
            repo.events.append_event(run.id, "llm", {"n": i})
        ids.append(run.id)
    return ids


def test_the_heads_of_many_runs(engine: Engine, clock: FakeClock) -> None:
    repo = RunStore(engine, clock=clock)
    a, b = runs_with_events(repo, [3, 1])
    unknown = str(uuid.uuid4())
    heads = repo.events.heads([a, b.upper(), unknown, "not-a-run", a])
    assert heads == {
        a: StreamHead(a, RunStatus.QUEUED, 3),
        b: StreamHead(b, RunStatus.QUEUED, 1),
    }
    assert repo.events.heads([]) == {} and repo.events.heads(["nope"]) == {}


def test_the_events_of_many_runs_each_after_its_cursor(engine: Engine, clock: FakeClock) -> None:
    repo = RunStore(engine, clock=clock)
    a, b, c = runs_with_events(repo, [4, 3, 2])
    found = repo.events.read_many({a: 2, b: 0, c: 2, "not-a-run": 0})
    assert [(e.run_id, e.seq) for e in found] == sorted(
        [(a, 3), (a, 4), (b, 1), (b, 2), (b, 3)], key=lambda k: (uuid.UUID(k[0]), k[1])
    )  # by run, then by number
    assert [e.payload for e in found if e.run_id == a] == [{"n": 3}, {"n": 4}]
    limited = repo.events.read_many({a: 0, b: 0}, limit=5)
    by_run: dict[str, list[int]] = {}
    for event in limited:
        by_run.setdefault(event.run_id, []).append(event.seq)
    assert len(limited) == 5  # each run's events a prefix after its cursor
    assert all(seqs == list(range(1, len(seqs) + 1)) for seqs in by_run.values())
    assert repo.events.read_many({}) == []


def test_the_waiting_mark_changes_when_a_run_enters_or_leaves(
    engine: Engine, clock: FakeClock
) -> None:
    repo = RunStore(engine, clock=clock)
    a, b = runs_with_events(repo, [1, 1])
    empty = repo.queries.waiting_mark()
    assert empty.count == 0 and empty.changed_at is None

    def status(run_id: str, value: RunStatus) -> None:
        clock.advance(seconds=1)
        with engine.begin() as conn:
            conn.execute(
                update(RUNS)
                .where(RUNS.c.id == uuid.UUID(run_id))
                .values(status=value.value, updated_at=clock(), event_seq=RUNS.c.event_seq + 1)
            )

    status(a, RunStatus.WAITING_FOR_APPROVAL)
    one = repo.queries.waiting_mark()
    assert one.count == 1 and one.changed_at == clock()
    status(b, RunStatus.WAITING_FOR_APPROVAL)
    status(a, RunStatus.QUEUED)
    swapped = repo.queries.waiting_mark()
    assert swapped.count == 1 and swapped != one
    assert repo.queries.waiting_mark() == swapped  # nothing moved: the same mark
