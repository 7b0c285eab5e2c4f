"""The inbox's sign-ins and the counts of failed ones, in the store (issue 26, defect 4),
on both databases: a sign-in is found until it is closed or expires, expired ones are
purged, and at most ``limit`` attempts per key take a slot in a window, on one process
or several."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from pydantic import JsonValue
from sqlalchemy import Engine, text

from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from airlock.workers.service.principals import Principal
from airlock.workers.service.sessions import (
    PER_ADDRESS,
    Credentials,
    Proved,
    Sessions,
    SignInFailedError,
    ThrottledError,
    source_of,
)
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


# -- sign-ins through the service (issue 42, item 5) --------------------------------------


def wrong() -> Proved:
    raise SignInFailedError("the token proves no one")


def right() -> Proved:
    return Principal(id="ann", method="inbox", every_role=True), None


WRONG = Credentials(signed=None, secret=wrong)
RIGHT = Credentials(signed=None, secret=right)


def outcome(sessions: Sessions, client: str, name: str, credentials: Credentials) -> str:
    try:
        sessions.sign_in(client, name, credentials)
    except ThrottledError:
        return "throttled"
    except SignInFailedError:
        return "failed"
    return "signed in"


def test_concurrent_failures_of_two_processes_count_up_to_the_allowance(
    db_url: str, clock: FakeClock
) -> None:
    """The check and the count are one guarded upsert: however the sign-ins of two
    processes interleave, an address fails ``PER_ADDRESS`` times in a window, and the
    rest are refused before their secret is checked."""
    engines = [make_engine(db_url) for _ in range(2)]
    sessions = [Sessions(RunStore(e, clock=clock), None) for e in engines]
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        start.wait()
        for j in range(4):
            outcomes.append(outcome(sessions[i % 2], "10.1.0.1", f"name-{i}-{j}", WRONG))

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert outcomes.count("failed") == PER_ADDRESS and len(outcomes) == 32
        assert outcomes.count("throttled") == 32 - PER_ADDRESS
        assert outcome(sessions[0], "10.1.0.2", "ann", RIGHT) == "signed in"
    finally:
        for e in engines:
            e.dispose()


def test_the_counts_of_ended_windows_go_at_the_next_sign_in(
    engine: Engine, clock: FakeClock
) -> None:
    """The table holds the windows that run, no more: a guesser that changes address
    and name leaves rows that the next sign-in after their window deletes."""
    sessions = Sessions(RunStore(engine, clock=clock), None)
    for i in range(40):
        assert outcome(sessions, f"10.2.0.{i}", f"name-{i}", WRONG) == "failed"
    assert rows(engine) == 80  # an address's and an address-and-name's each
    clock.advance(seconds=WINDOW.total_seconds())
    assert outcome(sessions, "10.2.1.1", "ann", RIGHT) == "signed in"
    assert rows(engine) == 2


def rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(text("SELECT count(*) FROM sign_in_failures")) or 0)


def test_an_ipv6_client_counts_by_its_64(engine: Engine, clock: FakeClock) -> None:
    """One host (or one customer of a provider) holds a /64: changing the address within
    it is the same source."""
    sessions = Sessions(RunStore(engine, clock=clock), None)
    for i in range(PER_ADDRESS):
        assert outcome(sessions, f"2001:db8:1:2::{i + 1:x}", f"n{i}", WRONG) == "failed"
    assert outcome(sessions, "2001:db8:1:2:ffff::9", "ann", RIGHT) == "throttled"
    assert outcome(sessions, "2001:db8:1:3::1", "ann", RIGHT) == "signed in"
    assert source_of("::ffff:10.3.0.1") == source_of("10.3.0.1") == "10.3.0.1"
    assert source_of("2001:db8:1:2:a:b:c:d") == "2001:db8:1:2::/64"
    assert source_of("testclient") == "testclient"


def test_a_check_that_is_no_ones_failure_is_not_counted(engine: Engine, clock: FakeClock) -> None:
    """An issuer whose keys cannot be fetched, a name that is not one: the error goes
    to the door, and the address keeps its allowance."""
    sessions = Sessions(RunStore(engine, clock=clock), None)

    def unavailable() -> Proved:
        raise RuntimeError("the issuer's keys cannot be fetched")

    for _ in range(PER_ADDRESS + 1):
        with pytest.raises(RuntimeError):
            sessions.sign_in("10.4.0.1", "ann", Credentials(signed=None, secret=unavailable))
    assert outcome(sessions, "10.4.0.1", "ann", RIGHT) == "signed in"
