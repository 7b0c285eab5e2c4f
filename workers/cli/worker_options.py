"""``airlock worker``'s options: the defaults it adds to ``celery worker``'s and what it
refuses before Celery sees it. Standard library only: ``airlock.workers.cli.launch`` reads them
before gevent patches anything."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

GREEN_POOLS = ("gevent", "eventlet")
DEFAULT_POOL = "gevent"
"""The pool ``airlock worker`` runs on a Redis broker unless ``-P`` says: segments wait
on their models in greenlets, so one process keeps hundreds in flight."""
DEFAULT_CONCURRENCY = 200
"""Segments one ``-P gevent`` worker process keeps in flight unless ``-c`` says: they
wait on their models in greenlets, and borrow a database connection only for each
statement (the process holds ``AIRLOCK_DB_POOL_SIZE`` per pool at most)."""

SERVER_BROKERS = ("redis://", "rediss://")
"""Brokers on which ``airlock worker`` defaults to ``-P gevent -c 200``. The embedded
broker (``filesystem://``, the default) keeps Celery's default pool: it is a folder
polled by one machine's processes, for trying Airlock out."""

FLAGS = frozenset(
    {
        "-D", "--detach", "--disable-prefetch", "-E", "--task-events", "--events",
        "--purge", "--discard", "--without-gossip", "--without-mingle",
        "--without-heartbeat", "-B", "--beat", "--help",
    }
)  # fmt: skip
"""``celery worker``'s options that take no value (a test checks them against Celery's):
every other option takes one, as click reads them."""


def options(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """``(option, value)`` for each option in ``args``, as click reads ``celery
    worker``'s: ``-X value``, ``-Xvalue``, ``--long value``, ``--long=value``, short
    flags run together (``-EPgevent``), nothing after ``--``. A value missing at the end
    is None."""
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, equals, value = arg.partition("=")
            if equals or name in FLAGS:
                found.append((name, value if equals else None))
            else:
                found.append((name, args[i] if i < len(args) else None))
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            for at in range(1, len(arg)):
                name = "-" + arg[at]
                if name in FLAGS:
                    found.append((name, None))
                    continue
                rest = arg[at + 1 :]
                if rest:
                    found.append((name, rest))
                else:
                    found.append((name, args[i] if i < len(args) else None))
                    i += 1
                break
    return found


def option(args: Sequence[str], short: str, long: str) -> str | None:
    """The value of ``short``/``long`` in ``args`` (the last one given), else None."""
    found = None
    for name, value in options(args):
        if name in (short, long):
            found = value
    return found


def given(args: Sequence[str], short: str, long: str) -> bool:
    return any(name in (short, long) for name, _ in options(args))


def worker_arguments(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``celery worker``'s arguments for ``airlock worker ARGS``: the operator's, and
    where they give no ``-P``, on a Redis broker, ``-P gevent``; with a green pool and
    no ``-c``, ``-c 200``. The embedded broker keeps Celery's default pool (prefork, a
    process per CPU). The operator's ``-P`` and ``-c`` always win."""
    arguments = list(args)
    broker = env.get("AIRLOCK_BROKER_URL", "")
    if not given(arguments, "-P", "--pool") and broker.startswith(SERVER_BROKERS):
        arguments = [*arguments, "-P", DEFAULT_POOL]
    if option(arguments, "-P", "--pool") in GREEN_POOLS and not given(
        arguments, "-c", "--concurrency"
    ):
        arguments = [*arguments, "-c", str(DEFAULT_CONCURRENCY)]
    return arguments


def usage_error(args: Sequence[str]) -> str | None:
    """What is wrong with ``args`` that Celery would take, or say less clearly."""
    for name, value in options(args):
        for short, long in (("-c", "--concurrency"), ("-n", "--hostname"), ("-P", "--pool")):
            if value is None and name in (short, long):
                return f"{short}/{long} needs a value"
    concurrency = option(args, "-c", "--concurrency")
    if concurrency is not None:
        if not concurrency.isdigit():
            return f"-c/--concurrency must be a whole number, not {concurrency!r}"
        if int(concurrency) < 1:
            return f"-c/--concurrency must be at least 1, not {concurrency}"
    return None


def pool_of(args: Sequence[str]) -> str | None:
    return option(args, "-P", "--pool")
