"""Connections: the engines, the connections a worker's segment thread keeps, and the
cache of the hot statements built once per shape."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection

T = TypeVar("T")


class Connections:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.postgres = engine.dialect.name == "postgresql"
        self._autocommit: Engine | None = None
        self._leases: Engine | None = None
        self._holder: int | None = None
        self._held: dict[Engine, Connection] = {}
        self._statements: dict[Hashable, Any] = {}
        self._apart: tuple[int, Engine] | None = None
        if self.postgres:
            self._autocommit = _autocommit(engine)
            self._leases = _autocommit(engine, synchronous_commit=False)
            event.listen(engine, "engine_disposed", self._dispose_siblings)

    def engine_for(self, *, durable: bool = True) -> Engine:
        """The engine whose connections ``one(durable=…)`` uses."""
        return (self._autocommit if durable else self._leases) or self.engine

    def _dispose_siblings(self, _engine: Engine) -> None:
        """Their pools go with the engine's."""
        for held in self._held.values():
            held.close()
        self._held = {}
        for sibling in (self._autocommit, self._leases, self._apart and self._apart[1]):
            if sibling is not None:
                sibling.dispose()
        self._apart = None

    def statement(self, key: Hashable, build: Callable[[], T]) -> T:
        """A statement of the hot path, built once per shape (``key``) with bind
        parameters: building and cache-keying SQLAlchemy constructs costs more than
        executing them on a local database."""
        statement: T | None = self._statements.get(key)
        if statement is None:
            statement = self._statements[key] = build()
        return statement

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """A transaction for several statements."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def one(self, *, durable: bool = True) -> Iterator[Connection]:
        """For one statement. On PostgreSQL it runs in autocommit: a single statement is
        atomic on its own, and BEGIN and COMMIT would cost two more round trips.
        ``durable=False``: its commit does not wait for the disk (the claim, lease
        renewals; see ``Transitions.claim`` for when that is safe). On SQLite (local,
        no round trips) it is a normal transaction, so it may hold several statements
        where PostgreSQL needs only one."""
        engine = self._autocommit if durable else self._leases
        if engine is None:  # SQLite
            with self.engine.begin() as conn:
                yield conn
        elif threading.get_ident() == self._holder:
            with self._held_connection(engine) as conn:
                yield conn
        else:
            with engine.connect() as conn:
                yield conn

    @contextmanager
    def apart(self) -> Iterator[Connection]:
        """For one statement of the process's lease renewer, a native thread: on
        PostgreSQL, on a connection of its own (an engine per process used by that
        thread alone, so its pool opens one connection; commits not waiting for the
        disk), never the segments' pools, whose locks are the gevent hub's under a
        gevent worker and whose connections may all be busy. On SQLite, as ``one``."""
        if self._leases is None:  # SQLite
            with self.engine.begin() as conn:
                yield conn
            return
        pid = os.getpid()
        if self._apart is None or self._apart[0] != pid:  # a forked child makes its own
            if self._apart is not None:
                self._apart[1].dispose(close=False)  # the parent's connections stay its own
            self._apart = (pid, _autocommit(self.engine, synchronous_commit=False))
        with self._apart[1].connect() as conn:
            yield conn

    @contextmanager
    def _held_connection(self, engine: Engine) -> Iterator[Connection]:
        held = self._held.get(engine)
        if held is None or held.closed or held.invalidated:
            held = self._held[engine] = engine.connect()
        try:
            yield held
        except BaseException:
            del self._held[engine]  # whatever went wrong, the next statement starts afresh
            held.close()
            raise

    def hold(self) -> None:
        """From now on the calling thread keeps its connections between statements
        (on PostgreSQL), instead of checking one out of the pool and back in for each:
        for a worker's segment thread, whose quick segment is two statements, that
        costs about as much as building them. Other threads use the pool as before.
        A connection whose statement fails is closed; the next one gets a fresh one."""
        self._holder = threading.get_ident()
        self._held = {}


def _autocommit(engine: Engine, *, synchronous_commit: bool = True) -> Engine:
    """An autocommit engine over ``engine``'s database, with a pool of its own like
    ``engine``'s: its connections are born in autocommit, so no checkout switches them
    in and out of it. ``synchronous_commit=False``: its commits do not wait for the
    disk."""
    sibling = create_engine(engine.url, pool=engine.pool.recreate(), isolation_level="AUTOCOMMIT")
    if not synchronous_commit:

        @event.listens_for(sibling, "connect")
        def _asynchronous(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.execute("SET synchronous_commit = off")

    return sibling
