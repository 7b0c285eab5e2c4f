"""Loaded into a real worker through ``AIRLOCK_AGENTS`` (it offers no agent of its own):
with ``AIRLOCK_TEST_KILL_EVERY=N`` set, every N-th statement the worker sends to
PostgreSQL has its connection killed, before it is sent and after it ran in turn, and
each kill is written to ``AIRLOCK_TEST_KILL_LOG`` (the statement's kind).

With ``AIRLOCK_TEST_AWAY_AFTER_STARTS=N`` instead, each of the first N starts of a call
that acts is written but its answer lost (killed after it ran), and then the database
is away for ``AIRLOCK_TEST_AWAY_SECONDS`` (every statement of the worker killed before
it is sent)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from airlock.loop import Agent
from tests.db_faults import ConnectionKiller, Pick


def _every(every: int) -> Pick:
    def pick(number: int, _statement: str) -> str | None:
        if number % every != every - 1:
            return None
        return "before" if (number // every) % 2 == 0 else "after"

    return pick


def _away_after_starts(starts: int, seconds: float) -> Pick:
    lock = threading.Lock()
    left, until = [starts], [0.0]

    def pick(_number: int, statement: str) -> str | None:
        with lock:
            if time.monotonic() < until[0]:
                return "before"
            if left[0] and "started_by" in statement:
                left[0] -= 1
                until[0] = time.monotonic() + seconds
                return "after"
        return None

    return pick


def _install() -> None:
    every = int(os.environ.get("AIRLOCK_TEST_KILL_EVERY", "0"))
    starts = int(os.environ.get("AIRLOCK_TEST_AWAY_AFTER_STARTS", "0"))
    url = os.environ.get("AIRLOCK_DATABASE_URL", "")
    if not url.startswith("postgres") or (every <= 0 and starts <= 0):
        return
    seconds = float(os.environ.get("AIRLOCK_TEST_AWAY_SECONDS", "0"))
    pick = _every(every) if every > 0 else _away_after_starts(starts, seconds)
    log = os.environ.get("AIRLOCK_TEST_KILL_LOG")
    ConnectionKiller(url, pick, log=Path(log) if log else None).install().arm()


_install()

AGENTS: list[Agent] = []
