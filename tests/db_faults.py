"""Killing PostgreSQL connections at chosen statements, as a failover, a restart, a pooler
or an idle timeout would: the server terminates the backend (``pg_terminate_backend``,
waited for), and the client finds its connection dead.

- ``before``: the backend dies as the statement is about to be sent; the statement
  fails and nothing of it committed.
- ``after``: the backend dies once the statement ran; in autocommit it committed, and
  its answer is lost (the client sees the error all the same).

Installed on every SQLAlchemy engine of the process (the store builds several). Used
by the contract test of a segment's statements, and loaded into a real worker through
``AIRLOCK_AGENTS`` (``tests.integration.fault_agents``) by the integration fault test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection, make_url

Pick = Callable[[int, str], str | None]
"""Given the statement's number (from 0, counted since the killer was armed) and its SQL,
``"before"``, ``"after"`` or None (leave it be)."""


TABLES = (
    "agent_runs", "tool_calls", "run_events", "outbox", "decisions", "approvals", "grants",
    "webhook_receipts", "beat_jobs", "inbox_sessions",
)  # fmt: skip


def kind_of(statement: str) -> str:
    """A statement's kind for a report: its verb and the tables it names, in order (a
    segment's writes are often one statement of several CTEs)."""
    words = statement.replace("(", " ").replace(")", " ").replace('"', "").split()
    verb = words[0].upper() if words else "?"
    tables = [w for w in words if w in TABLES]
    return f"{verb} {' '.join(dict.fromkeys(tables))}".strip()


class ConnectionKiller:
    def __init__(self, admin_url: str, pick: Pick, *, log: Path | None = None) -> None:
        url = make_url(admin_url).set(drivername="postgresql")
        self._admin_url = url.render_as_string(hide_password=False)
        self._admin: psycopg.Connection[Any] | None = None
        self._pick = pick
        self._log = log
        self._count = 0
        self._armed = False
        self._lock = threading.Lock()
        self.killed: list[tuple[str, str]] = []
        """(where, the statement's kind) of each kill."""

    def install(self) -> ConnectionKiller:
        event.listen(Engine, "before_cursor_execute", self._before)
        event.listen(Engine, "after_cursor_execute", self._after)
        return self

    def uninstall(self) -> None:
        event.remove(Engine, "before_cursor_execute", self._before)
        event.remove(Engine, "after_cursor_execute", self._after)
        if self._admin is not None:
            self._admin.close()

    def arm(self, pick: Pick | None = None, *, reset: bool = True) -> None:
        """Count statements (from 0 again unless ``reset`` is false), with a new ``pick``."""
        with self._lock:
            self._armed = True
            if reset:
                self._count = 0
            if pick is not None:
                self._pick = pick

    @property
    def count(self) -> int:
        """The statements counted since the killer was armed afresh."""
        return self._count

    def disarm(self) -> None:
        self._armed = False

    def _where(self, statement: str) -> str | None:
        with self._lock:
            if not self._armed:
                return None
            number, self._count = self._count, self._count + 1
        return self._pick(number, statement)

    def _before(self, conn: Connection, _c: Any, statement: str, *_: Any) -> None:
        if self._postgres(conn):
            where = self._where(statement)
            conn.info["airlock_kill_after"] = where == "after"
            if where == "before":
                self._kill(conn, "before", statement)

    def _after(self, conn: Connection, _c: Any, statement: str, *_: Any) -> None:
        if conn.info.pop("airlock_kill_after", False):
            self._kill(conn, "after", statement)
            conn.connection.dbapi_connection.execute("SELECT 1")  # type: ignore[union-attr]

    @staticmethod
    def _postgres(conn: Connection) -> bool:
        return conn.dialect.name == "postgresql"

    def _kill(self, conn: Connection, where: str, statement: str) -> None:
        pid = conn.connection.dbapi_connection.info.backend_pid  # type: ignore[union-attr]
        with self._lock:
            if self._admin is None or self._admin.closed:
                self._admin = psycopg.connect(self._admin_url, autocommit=True)
            self._admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
            self.killed.append((where, kind_of(statement)))
        if self._log is not None:
            with self._log.open("a", encoding="utf-8") as out:
                out.write(f"{where}\t{kind_of(statement)}\n")
