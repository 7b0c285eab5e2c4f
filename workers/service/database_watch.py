"""A worker's word on its database, in its log: a worker that cannot use its database
(unreachable, an SQLite file or folder that is not there, a schema that is not this
version's) says so at WARNING, naming the database with its password hidden and what
is wrong, and checks again with backoff, saying so each time, until it can; then once,
at INFO, that it can. While it can, it checks now and then, so that a database lost
later is said too. Each check only reads (``airlock.persistence.schema.check_url``)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from airlock.persistence.db import shown_url
from airlock.persistence.schema import SchemaStatus, check_url, first_line
from airlock.workers.service import native
from airlock.workers.service.backoff import backoff

log = logging.getLogger("airlock")

EVERY = 30.0
"""Seconds between checks while the database is ready."""
CAP = 60.0
"""The longest wait between checks while it is not."""


class DatabaseWatch:
    def __init__(
        self,
        check: Callable[[], SchemaStatus],
        *,
        every: float = EVERY,
        cap: float = CAP,
    ) -> None:
        self._check = check
        self._every = every
        self._cap = cap
        self._failures = 0
        self._ready: bool | None = None
        """None before the first check."""

    def step(self) -> float:
        """One check, said if it is worth saying; the seconds until the next."""
        try:
            status = self._check()
        except Exception as exc:  # a check that fails is a database that cannot be used
            return self._not_ready(f"cannot check the database: {type(exc).__name__}: {exc}")
        if not status.ready:
            return self._not_ready(status.problem, status)
        if self._ready is not True:
            log.info(
                "the database %s is ready",
                status.database,
                extra={"action": "worker.database_ready", "database": status.database},
            )
        self._ready, self._failures = True, 0
        return self._every

    def _not_ready(self, problem: str, status: SchemaStatus | None = None) -> float:
        delay = backoff(self._failures, cap=self._cap)
        self._ready, self._failures = False, self._failures + 1
        log.warning(
            "%s; this worker checks again in %.0f s",
            problem,
            delay,
            extra={
                "action": "worker.database_not_ready",
                "database": None if status is None else status.database,
                "state": None if status is None else status.state.value,
                "retry_in": round(delay, 1),
            },
        )
        return delay

    def run(self, sleep: Callable[[float], None]) -> None:
        """Check for ever (the body of the worker's thread)."""
        while True:
            sleep(self.step())


def watch_database(url: str) -> DatabaseWatch:
    """Start watching the database at ``url`` from an OS thread of this process (it
    goes on whatever the pool: see ``airlock.workers.service.native``)."""
    watch = DatabaseWatch(lambda: check_url(url))
    native.start_thread(lambda: watch.run(native.sleep))
    return watch


def cannot_use(url: str, exc: BaseException) -> str:
    """What a statement's failure says of the database at ``url`` (password hidden)."""
    why = first_line(exc) if isinstance(exc, SQLAlchemyError) else f"{type(exc).__name__}: {exc}"
    return f"cannot use the database {shown_url(url)} ({why})"
