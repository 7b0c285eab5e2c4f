"""The API on a database whose schema is not this code's (no tables, behind, ahead, or
a database it cannot reach): every ``/v1`` request is answered 503 problem+json naming
the state and ``airlock db upgrade``, never a plain-text 500.

The schema is not checked on every request: once, at the first request, and again
only after a statement fails on a table or column that is not there (a database
dropped, restored or downgraded under a running API), or because the database could
not be used (it went away under a serving API: that request is 503 database
unavailable). While it is not ready, each request checks again, so the API serves as
soon as the database is migrated, or back, without a restart."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import replace

from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock.persistence.schema import SchemaState, SchemaStatus, first_line, is_schema_error
from airlock.workers.http.problems import schema_problem
from airlock.workers.service import is_database_error

log = logging.getLogger("airlock")

GATED = "/v1/"


class SchemaWatch:
    """What the API knows of its database's schema: ``status`` checks it (``probe``)
    when it is not known to be current, and reuses a check that ran while it waited."""

    def __init__(self, probe: Callable[[], SchemaStatus]) -> None:
        self._probe = probe
        self._lock = threading.Lock()
        self._known: SchemaStatus | None = None
        self._checks = 0

    def ready(self) -> bool:
        """Known to be current (no I/O: a request's fast path)."""
        known = self._known
        return known is not None and known.ready

    def status(self) -> SchemaStatus:
        known = self._known
        if known is not None and known.ready:
            return known
        seen = self._checks
        with self._lock:
            if self._known is not None and (self._known.ready or self._checks != seen):
                return self._known
            return self._check()

    def recheck(self) -> SchemaStatus:
        """A check now, whatever is known (``/readyz``)."""
        with self._lock:
            return self._check()

    def lost(self, exc: BaseException) -> SchemaStatus:
        """A statement failed on a missing table or column: the schema is not current
        any more; checked again to say how."""
        log.warning(
            "a statement found the schema changed: %s",
            str(exc).splitlines()[0],
            extra={"action": "api.schema_lost"},
        )
        with self._lock:
            status = self._check()
        if status.ready:  # at the head's revision, but a table or column of it is gone
            gone = "a table or column this version uses is not there"
            return replace(status, state=SchemaState.MISSING, reason=gone)
        return status

    def away(self, exc: BaseException) -> SchemaStatus:
        """A statement failed because the database could not be used (it went away, a
        connection was dropped): unreachable as far as that request knows; the next
        request checks again."""
        log.warning(
            "a statement could not use the database: %s",
            first_line(exc) if isinstance(exc, SQLAlchemyError) else exc,
            extra={"action": "api.database_away"},
        )
        with self._lock:
            known = self._known if self._known is not None else self._check()
            reason = first_line(exc) if isinstance(exc, SQLAlchemyError) else str(exc)
            self._known = replace(known, state=SchemaState.UNREACHABLE, reason=reason)
            return self._known

    def _check(self) -> SchemaStatus:
        before = self._known
        status = self._probe()
        self._known, self._checks = status, self._checks + 1
        if before is None or before.state is not status.state:
            if status.ready:
                log.info("database schema is current", extra={"action": "api.schema_ready"})
            else:
                log.warning(status.problem, extra={"action": "api.schema_not_ready"})
        return status


class SchemaGate:
    """Answers ``/v1`` requests 503 while the schema is not current, and any request
    whose statement failed on a missing table or column (every route of the app,
    inside it)."""

    def __init__(self, app: ASGIApp, *, watch: SchemaWatch) -> None:
        self._app = app
        self._watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["path"].startswith(GATED) and not self._watch.ready():
            status = await asyncio.to_thread(self._watch.status)
            if not status.ready:
                await schema_problem(status)(scope, receive, send)
                return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._app(scope, receive, watched)
        except Exception as exc:
            if started:
                raise
            if is_schema_error(exc):
                status = await asyncio.to_thread(self._watch.lost, exc)
            elif is_database_error(exc):
                status = await asyncio.to_thread(self._watch.away, exc)
            else:
                raise
            await schema_problem(status)(scope, receive, send)
