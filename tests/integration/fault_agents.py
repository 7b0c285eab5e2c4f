"""Loaded into a real worker through ``AIRLOCK_AGENTS`` (it offers no agent of its own):
with ``AIRLOCK_TEST_KILL_EVERY=N`` set, every N-th statement the worker sends to
PostgreSQL has its connection killed, before it is sent and after it ran in turn, and
each kill is written to ``AIRLOCK_TEST_KILL_LOG`` (the statement's kind)."""

from __future__ import annotations

import os
from pathlib import Path

from airlock.loop import Agent
from tests.db_faults import ConnectionKiller


def _install() -> None:
    every = int(os.environ.get("AIRLOCK_TEST_KILL_EVERY", "0"))
    url = os.environ.get("AIRLOCK_DATABASE_URL", "")
    if every <= 0 or not url.startswith("postgres"):
        return

    def pick(number: int, _statement: str) -> str | None:
        if number % every != every - 1:
            return None
        return "before" if (number // every) % 2 == 0 else "after"

    log = os.environ.get("AIRLOCK_TEST_KILL_LOG")
    ConnectionKiller(url, pick, log=Path(log) if log else None).install().arm()


_install()

AGENTS: list[Agent] = []
