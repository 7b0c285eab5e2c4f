"""The hot statements, compiled once and sent straight through psycopg.

A quick segment is two statements (its claim and its end), and an approval one, on
a local PostgreSQL, where SQLAlchemy's work per execution (the compiled-cache
lookup, parameter processing, the execution context, the result's set-up) costs
about as much as the server's. A ``DriverStatement`` does that work once: it
compiles a Core statement for the psycopg dialect, keeps the parameters whose values
are fixed in the statement and the types' bind processors, and from then on hands
the SQL and the parameters to the psycopg connection under the SQLAlchemy
``Connection`` it is given (psycopg prepares it on the server after a few runs, as
it does SQLAlchemy's).

It behaves as if SQLAlchemy had sent the statement where it matters: a driver error
is raised as SQLAlchemy's exception of the same kind (``OperationalError``,
``IntegrityError``…, the driver's as its ``orig``), and a connection that the error
left unusable is invalidated, so the pool never hands it out again, nor the ones idle
beside it (the server dropped them too, as in a restart). Engine events
(``before_cursor_execute``…) and the engine's ``echo`` do not see it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import psycopg
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler


class DriverStatement:
    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        if dialect.driver != "psycopg":
            raise ValueError(f"a DriverStatement needs psycopg, not {dialect.driver}")
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        self.sql = compiled.string
        self._dialect = dialect
        self._fixed: dict[str, Any] = {}
        self._processors: dict[str, Callable[[Any], Any]] = {}
        for bind, name in compiled.bind_names.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if not bind.required:  # a value written into the statement: processed once
                value = bind.effective_value
                self._fixed[name] = process(value) if process else value
            elif process:
                self._processors[name] = process
        # what a SELECT returns, by name, with each type's result processing (SafeText's
        # decoding…), for ``first``
        self._columns = [
            (column.keyname, column.type.dialect_impl(dialect).result_processor(dialect, None))
            for column in compiled._result_columns
        ]

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> psycopg.Cursor[Any]:
        """Run on ``conn``'s driver connection. On an autocommit connection the
        statement commits on its own; on another, in ``conn``'s transaction, which it
        begins as SQLAlchemy would (else its commit and rollback would not reach the
        transaction the driver began)."""
        values = self._fixed | dict(params)
        for name, process in self._processors.items():
            values[name] = process(values[name])
        pooled = conn.connection
        driver = cast(psycopg.Connection[Any], pooled.driver_connection)
        if not driver.autocommit and not conn.in_transaction():
            conn.begin()
        try:
            return driver.execute(self.sql, values)
        except psycopg.Error as exc:
            invalidated = self._dialect.is_disconnect(cast(Any, exc), pooled, None)
            if invalidated:
                conn.invalidate(exc)
                # the server went away: the pool's idle connections are as dead as
                # this one, and are closed, not handed out (SQLAlchemy invalidates
                # the pool on a disconnect too)
                conn.engine.pool.dispose()
            raise DBAPIError.instance(
                self.sql,
                values,
                exc,
                psycopg.Error,
                connection_invalidated=invalidated,
                dialect=self._dialect,
            ) from exc

    def first(self, conn: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The first row a SELECT returns, by column name, its values processed as
        SQLAlchemy would."""
        row = self.execute(conn, params).fetchone()
        if row is None:
            return None
        return {
            name: process(value) if process is not None else value
            for (name, process), value in zip(self._columns, row, strict=True)
        }
