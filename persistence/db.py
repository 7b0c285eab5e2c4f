"""Engines and sessions from ``AIRLOCK_DATABASE_URL``."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, NullPool, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from airlock.loop.errors import AirlockError

DEFAULT_DATABASE_URL = "sqlite:///./airlock.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000


class ConfigurationError(AirlockError, ValueError):
    """A setting is missing or malformed; the message names the variable."""


QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)
"""A password in a URL's query: libpq takes ``password`` and ``sslpassword`` there,
redis-py ``password``."""


def hide_query_password(url: str) -> str:
    """``url`` with a password its query holds shown as ``***``."""
    return QUERY_PASSWORD.sub(r"\1***", url)


USER_PASSWORD = re.compile(r"^([a-z0-9+.-]+://[^:/@]*:)([^@/]*)@", re.IGNORECASE)


def hide_password(url: str) -> str:
    """A broker URL as it may be printed: a password in its user part shown as ``**``
    (as kombu shows it), and one in its query as ``***``."""
    return hide_query_password(USER_PASSWORD.sub(r"\1**@", url))


def shown_url(url: str | URL) -> str:
    """A database URL as it may be printed: its password, in its user part or its
    query, shown as ``***``; an SQLite file named relative to the folder the process runs
    in, by its absolute path (a hint read in another folder names the file it means)."""
    parsed = make_url(url) if isinstance(url, str) else url
    file = sqlite_file(parsed)
    if file is not None and not file.is_absolute():
        parsed = parsed.set(database=str(file.absolute()))
    return hide_query_password(parsed.render_as_string(hide_password=True))


def database_url() -> str:
    return os.environ.get("AIRLOCK_DATABASE_URL") or DEFAULT_DATABASE_URL


def normalise_url(url: str) -> str:
    """Accept the usual spellings; PostgreSQL always goes through psycopg 3."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise ConfigurationError(
            f"AIRLOCK_DATABASE_URL is not a database URL: {_without_credentials(url)!r}"
        ) from exc
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigurationError(
            "AIRLOCK_DATABASE_URL must be a postgresql:// or sqlite:// URL,"
            f" got {shown_url(parsed)!r}"
        )
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() != "psycopg":
        raise ConfigurationError(
            "AIRLOCK_DATABASE_URL: PostgreSQL is reached through psycopg 3"
            f" (postgresql:// or postgresql+psycopg://), not {parsed.get_driver_name()!r}"
        )
    return parsed.render_as_string(hide_password=False)


def _without_credentials(url: str) -> str:
    """A URL SQLAlchemy cannot parse, as it may be shown: whatever comes before an
    ``@`` (a user and a password) left out."""
    if "@" not in url:
        return hide_query_password(url)
    url = hide_query_password(url)
    scheme, _, rest = url.partition("://")
    return f"{scheme}://…@{rest.rpartition('@')[2]}" if rest else "…@" + url.rpartition("@")[2]


def make_engine(url: str | None = None, **kwargs: Any) -> Engine:
    url = normalise_url(url or database_url())
    # a statement's parameters are tool arguments, results and secrets: a database
    # error's message (logged, shown in a run's error) names the statement only
    kwargs.setdefault("hide_parameters", True)
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        # pysqlite's own transaction handling defers BEGIN; take control so that
        # every transaction starts with BEGIN IMMEDIATE and writers queue on the busy timeout.
        event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN IMMEDIATE"))
        return engine
    # No pre-ping: it costs a round trip per checkout. A connection lost to a
    # database restart raises, SQLAlchemy invalidates the pool, the task retries.
    connect_args = {**postgres_connect_args(url), **kwargs.pop("connect_args", {})}
    return create_engine(url, connect_args=connect_args, **kwargs)


POSTGRES_TIMEOUTS: dict[str, int] = {
    "connect_timeout": 10,
    # a silent peer (a server gone without a FIN, a dropped route) is found out by TCP
    # within a minute: no thread (the keeper, renewing every lease of its process)
    # hangs on a dead socket for the kernel's two hours
    "keepalives": 1,
    "keepalives_idle": 20,
    "keepalives_interval": 5,
    "keepalives_count": 4,
    "tcp_user_timeout": 60_000,
}
"""libpq connection parameters set unless the URL names them."""


def postgres_connect_args(url: str) -> dict[str, int]:
    named = set(make_url(url).query)
    return {k: v for k, v in POSTGRES_TIMEOUTS.items() if k not in named}


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    # FULL: a ledger record or write-ahead checkpoint must survive a power loss too
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def sqlite_file(url: str | URL) -> Path | None:
    """The file of an SQLite database (None: another database, one in memory, or one
    named by a ``file:`` URI)."""
    parsed = make_url(url) if isinstance(url, str) else url
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    return None if database.startswith("file:") else Path(database)


def read_only_engine(engine: Engine) -> Engine:
    """An engine over ``engine``'s database for reads that must change nothing (the
    probes, the figures). On PostgreSQL: ``engine`` itself (what is read through it is
    only ever read). On an SQLite file: an engine of its own, without a pool, whose
    connections open the file read-only and never create it, nor its ``-wal`` and
    ``-shm`` (``read_only_connection``). Anything else: ``engine``."""
    file = sqlite_file(engine.url)
    if file is None:
        return engine
    reader = create_engine(
        engine.url, creator=lambda: read_only_connection(file), poolclass=NullPool
    )
    # deferred: a reader takes no write lock (``make_engine``'s BEGIN IMMEDIATE would)
    event.listen(reader, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
    return reader


WAL_HEADER = 18
"""The byte of an SQLite file's header that says 2 when it is in WAL mode."""


def read_only_connection(file: Path) -> sqlite3.Connection:
    """``file`` opened read-only (``mode=ro``). SQLite makes a WAL database's ``-wal``
    and ``-shm`` even for a read-only connection, when they are not there: they are
    when another connection has the database open, and a reader then shares them; when
    they are not, no one has it open (the last connection checkpointed every page into
    the file and removed them), so the file is read as it stands (``immutable``),
    without them. (A writer that opens the database meanwhile writes to a ``-wal`` of
    its own, which that reader does not see: it reads the file as it was; a checkpoint
    under it may at worst make that one read fail.) Raises ``sqlite3.OperationalError``
    for a file that is not there (it is not made)."""
    uri = f"{file.absolute().as_uri()}?mode=ro"
    if _in_wal_mode(file) and not all(
        Path(f"{file}{suffix}").exists() for suffix in ("-wal", "-shm")
    ):
        uri += "&immutable=1"
    conn = sqlite3.connect(
        uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False
    )
    conn.isolation_level = None  # transactions as the engine begins them
    return conn


def _in_wal_mode(file: Path) -> bool:
    try:
        with file.open("rb") as f:
            header = f.read(WAL_HEADER + 1)
    except OSError:
        return False
    return len(header) > WAL_HEADER and header[WAL_HEADER] == 2
