"""The inbox's sign-ins and the counts of failed ones, in the store (issue 26, defect 4),
on both databases: a sign-in is found until it is closed or expires, expired ones are
purged, and at most ``limit`` attempts per key take a slot in a window, on one process
or several."""

from __future__ import annotations

import threading
from datetime import timedelta

from pydantic import JsonValue
from sqlalchemy import Engine

from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from tests.conftest import FakeClock

WINDOW = timedelta(minutes=5)
PRINCIPAL: dict[str, JsonValue] = {
    "id": "ann",
    "method": "inbox",
    "roles": [],
    "every_role": True,
    "issuer": None,
}


def test_a_sign_in_lasts_until_it_is_closed_or_expires(engine: Engine, clock: FakeClock) -> None:
    sessions = RunStore(engine, clock=clock).sessions
    until = sessions.open("a" * 64, PRINCIPAL, "csrf-a", lasts=timedelta(hours=8))
    assert until == clock.now + timedelta(hours=8)
    found = sessions.find("a" * 64)
    assert found is not None and found.principal == PRINCIPAL and found.csrf == "csrf-a"
    assert sessions.find("b" * 64) is None
    assert sessions.close("a" * 64) and not sessions.close("a" * 64)
    assert sessions.find("a" * 64) is None
    token_ends = clock.now + timedelta(minutes=10)
    assert sessions.open("c" * 64, PRINCIPAL, "csrf-c", lasts=timedelta(hours=8), until=token_ends)
    clock.advance(minutes=9, seconds=59)
    assert sessions.find("c" * 64) is not None
    clock.advance(seconds=1)
    assert sessions.find("c" * 64) is None
    assert sessions.purge() == 1 and sessions.purge() == 0


def test_failures_take_slots_up_to_the_limit_until_the_window_ends(
    engine: Engine, clock: FakeClock
) -> None:
    throttle = RunStore(engine, clock=clock).throttle
    slots = [throttle.take("k", limit=3, window=WINDOW) for _ in range(3)]
    assert all(s.granted for s in slots) and throttle.failures("k") == 3
    clock.advance(minutes=1)
    refused = throttle.take("k", limit=3, window=WINDOW)
    assert not refused.granted and refused.retry_after == 240
    assert throttle.failures("k") == 3  # a refused attempt is not counted
    assert throttle.take("other", limit=3, window=WINDOW).granted
    throttle.refund(slots[0])  # that attempt succeeded
    assert throttle.take("k", limit=3, window=WINDOW).granted
    assert not throttle.take("k", limit=3, window=WINDOW).granted
    clock.advance(minutes=4)
    fresh = throttle.take("k", limit=3, window=WINDOW)
    assert fresh.granted and fresh.retry_after == WINDOW.total_seconds()
    assert throttle.failures("k") == 1
    throttle.refund(slots[1])  # of the window that ended: gives back nothing of this one
    assert throttle.failures("k") == 1
    clock.advance(minutes=5)
    assert throttle.purge() == 2 and throttle.failures("k") == 0


def test_concurrent_attempts_of_two_processes_take_at_most_the_limit(
    db_url: str, clock: FakeClock
) -> None:
    """Each take is one guarded upsert: however the attempts of two processes (two
    engines) interleave, ``limit`` of them win the window."""
    engines = [make_engine(db_url) for _ in range(2)]
    stores = [RunStore(e, clock=clock) for e in engines]
    start = threading.Barrier(8)
    granted: list[bool] = []

    def attempt(i: int) -> None:
        start.wait()
        for _ in range(3):
            slot = stores[i % 2].throttle.take("ann", limit=5, window=WINDOW)
            granted.append(slot.granted)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert granted.count(True) == 5 and len(granted) == 24
        assert stores[0].throttle.failures("ann") == 5
    finally:
        for e in engines:
            e.dispose()
