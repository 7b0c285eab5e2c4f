"""Retrying a unit of the store when the database connection dropped under it.

A failover, a restart, a pooler or an idle timeout kills connections while the server
(or its replacement) is up a moment later. A segment must not lose its work for that:
each unit it writes with (the claim, the checkpoint, a ledger record, its events, its
transition) is retried on a fresh connection, with a bounded backoff, as one unit. A
unit is retried only when the error says the connection (or the server) went away, and
only units that are safe to repeat are: each says why where it is decorated.

A unit whose first attempt committed but whose answer was lost is repeated too: a
guarded transition then finds its guard moved (by itself) and says so, and its caller
confirms from the row (``confirm``); events appended twice are told twice.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

log = logging.getLogger("airlock")

P = ParamSpec("P")
T = TypeVar("T")

SQLITE_TRANSIENT = ("database is locked", "unable to open database file", "disk i/o error")
"""SQLite's errors that a moment later may not recur (a busy writer past the busy
timeout, a file system that came back)."""


def is_transient(exc: BaseException) -> bool:
    """The statement failed because the connection or the server went away (or no pooled
    connection came free in time), not because of what it asked: a fresh connection may
    succeed."""
    if isinstance(exc, PoolTimeoutError):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    module = type(orig).__module__
    if module.startswith("psycopg"):
        # class 08 (connection exception), 57P (operator intervention: admin shutdown,
        # crash shutdown, cannot connect now), or no SQLSTATE at all (the socket died)
        state = getattr(orig, "sqlstate", None)
        return state is None or state.startswith(("08", "57P"))
    if module.startswith("sqlite3"):
        return any(text in str(orig).lower() for text in SQLITE_TRANSIENT)
    return False


@dataclass(frozen=True)
class RetryPolicy:
    """How long a unit is retried while the database is away, and how often."""

    seconds: float = 30.0
    """The budget of one unit: past it the error propagates (the segment gives its run
    back to be continued later)."""
    result_seconds: float = 600.0
    """The budget of recording a result of a call that acted: held in memory that long,
    since nothing else knows it."""
    first_delay: float = 0.05
    max_delay: float = 2.0


def retrying(
    policy: RetryPolicy,
    unit: Callable[[int], T],
    *,
    what: str,
    seconds: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``unit(attempt)`` (0 first), repeated on a transient error until it succeeds or
    ``seconds`` (the policy's budget by default) have passed; then the last error."""
    budget = policy.seconds if seconds is None else seconds
    deadline = clock() + budget
    attempt = 0
    while True:
        try:
            return unit(attempt)
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = min(policy.max_delay, policy.first_delay * 2**attempt)
            delay *= random.uniform(0.5, 1.0)
            if clock() + delay > deadline:
                log.warning(
                    "database unavailable for %s; gave up after %.0f s",
                    what,
                    budget,
                    extra={"action": "db.gave_up", "unit": what},
                )
                raise
            log.warning(
                "database connection lost during %s; retrying on a fresh connection",
                what,
                extra={"action": "db.retry", "unit": what, "attempt": attempt + 1},
            )
            sleep(delay)
            attempt += 1


def retried(method: Callable[P, T]) -> Callable[P, T]:
    """A store method retried as one unit (``retrying``) on its part's policy. Only for
    methods that are safe to repeat, also after a first attempt that committed."""
    what = method.__qualname__

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        owner: Any = args[0]
        policy: RetryPolicy = owner._ctx.retry
        return retrying(policy, lambda _attempt: method(*args, **kwargs), what=what)

    return wrapper
