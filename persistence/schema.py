"""Whether a database's schema is the one this code needs: its Alembic revision
against the migrations' head, read without creating anything (an SQLite file that is
not there is not made by looking at it, and one that is there is read through
``read_only_engine``).

The API and the CLI answer with ``SchemaStatus.problem``: one line that names the
state and the command that fixes it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from airlock.persistence.db import make_engine, read_only_engine, shown_url, sqlite_file
from airlock.persistence.migrate import alembic_config, upgrade

UPGRADE = "airlock db upgrade"
"""The command that brings a database to this code's schema."""


class SchemaState(StrEnum):
    CURRENT = "current"
    ABSENT = "absent"
    """An SQLite database whose file is not there (yet)."""
    MISSING = "missing"
    """No tables, or none that Alembic made (no ``alembic_version``)."""
    OUTDATED = "outdated"
    """Behind the migrations' head."""
    AHEAD = "ahead"
    """At a revision this code does not know: newer code migrated it."""
    UNREACHABLE = "unreachable"
    """The server does not answer, or the database does not exist."""


@dataclass(frozen=True)
class SchemaStatus:
    state: SchemaState
    database: str
    """The URL, its password hidden."""
    head: str
    revision: str | None = None
    """The database's revision(s), when it has any."""
    reason: str | None = None
    """Why the database could not be reached, in the driver's words (first line); or
    why a database without Alembic's revision is not simply empty."""

    @property
    def ready(self) -> bool:
        return self.state is SchemaState.CURRENT

    @property
    def problem(self) -> str:
        """One line that names the database, what is wrong and what fixes it ('' when
        ready): for the operator."""
        return self.explain(named=True)

    def explain(self, *, named: bool) -> str:
        """``problem``; without the database's URL and the driver's words (``named``
        false: for the API's clients)."""
        where = f"the database {self.database}" if named else "the database"
        match self.state:
            case SchemaState.CURRENT:
                return ""
            case SchemaState.ABSENT:
                file = sqlite_file(self.database)
                shown = f" {file.absolute()}" if named and file is not None else ""
                return f"the database file{shown} does not exist: run `{UPGRADE}`"
            case SchemaState.MISSING if self.reason:
                return f"{where} has no Airlock schema ({self.reason}): run `{UPGRADE}`"
            case SchemaState.MISSING:
                return f"{where} has no tables: run `{UPGRADE}`"
            case SchemaState.OUTDATED:
                return (
                    f"{where} is at revision {self.revision}, behind this version's "
                    f"{self.head}: run `{UPGRADE}`"
                )
            case SchemaState.AHEAD:
                return (
                    f"{where} is at revision {self.revision}, which this version of Airlock "
                    f"does not know (newer code migrated it; this version's head is "
                    f"{self.head}): run the newer version, or `{UPGRADE}` with it"
                )
            case SchemaState.UNREACHABLE if named:
                return f"cannot use {where}: {self.reason}"
            case SchemaState.UNREACHABLE:
                return f"{where} cannot be reached"


@lru_cache(maxsize=8)
def head_revision(url: str) -> str:
    """The migrations' head (the script directory is read once per process)."""
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert head is not None, "the migrations have no head"
    return head


def upgrade_or_explain(url: str, revision: str = "head") -> str | None:
    """Migrate the database to ``revision``; or one line that names it and says why it
    could not be (None: done)."""
    shown = shown_url(url)
    file = sqlite_file(url)
    if file is not None and not file.parent.is_dir():
        return (
            f"cannot use the database {shown}: the folder {file.parent.absolute()} does not exist"
        )
    try:
        upgrade(url, revision)
    except DBAPIError as exc:  # refused, no such database or folder…
        return f"cannot use the database {shown}: {first_line(exc)}"
    except CommandError as exc:  # a revision this version does not know
        return f"cannot upgrade the database {shown}: {exc}"
    return None


def check_url(url: str) -> SchemaStatus:
    """``check`` on an engine of its own, read-only, disposed of afterwards."""
    engine = make_engine(url)
    try:
        return check(read_only_engine(engine))
    finally:
        engine.dispose()


def check(engine: Engine) -> SchemaStatus:
    url = engine.url.render_as_string(hide_password=False)
    shown = shown_url(engine.url)
    head = head_revision(url)
    match sqlite_file(url):
        case Path() as file if not file.parent.is_dir():
            reason = f"the folder {file.parent.absolute()} does not exist"
            return SchemaStatus(SchemaState.UNREACHABLE, shown, head, reason=reason)
        case Path() as file if not file.exists():
            return SchemaStatus(SchemaState.ABSENT, shown, head)
    try:
        with engine.connect() as conn:
            revisions = MigrationContext.configure(conn).get_current_heads()
            tables = _tables(conn) if not revisions else None
    except SQLAlchemyError as exc:  # refused, no such database, no connection free in time…
        return SchemaStatus(SchemaState.UNREACHABLE, shown, head, reason=first_line(exc))
    if not revisions:
        made = "it has tables, but none made by its migrations" if tables else None
        return SchemaStatus(SchemaState.MISSING, shown, head, reason=made)
    revision = ", ".join(revisions)
    if revisions == (head,):
        return SchemaStatus(SchemaState.CURRENT, shown, head, revision)
    state = SchemaState.OUTDATED if _all_known(revisions, url) else SchemaState.AHEAD
    return SchemaStatus(state, shown, head, revision)


def _tables(conn: Connection) -> list[str]:
    return inspect(conn).get_table_names()


def _all_known(revisions: tuple[str, ...], url: str) -> bool:
    script = ScriptDirectory.from_config(alembic_config(url))
    try:
        return all(script.get_revision(r) is not None for r in revisions)
    except CommandError:
        return False


def first_line(exc: SQLAlchemyError) -> str:
    """The driver's message (SQLAlchemy's, without one), its first line: psycopg adds
    lines of context, SQLAlchemy the statement."""
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    text = str(cause).strip() or type(cause).__name__
    return text.splitlines()[0].strip()


SCHEMA_ERRORS = ("42P01", "42703")
"""PostgreSQL's undefined table and undefined column."""
SQLITE_SCHEMA_ERRORS = ("no such table", "no such column", "has no column named")


def is_schema_error(exc: BaseException) -> bool:
    """``exc`` is a statement that failed on a table or column that is not there: the
    schema is not this code's (missing, or behind)."""
    if not isinstance(exc, SQLAlchemyError):
        return False
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    if getattr(orig, "sqlstate", None) in SCHEMA_ERRORS:
        return True
    return type(orig).__module__ == "sqlite3" and str(orig).startswith(SQLITE_SCHEMA_ERRORS)
