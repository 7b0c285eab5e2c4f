"""``airlock worker``'s options: the defaults it adds to ``celery worker``'s and what it
refuses before Celery sees it. Standard library only: ``workers.cli.launch`` reads them
before gevent patches anything."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

GREEN_POOLS = ("gevent", "eventlet")
DEFAULT_CONCURRENCY = 200
"""Segments one ``-P gevent`` worker process keeps in flight unless ``-c`` says: they
wait on their models in greenlets, and borrow a database connection only for each
statement (the process holds ``AIRLOCK_DB_POOL_SIZE`` per pool at most)."""


def option(args: Sequence[str], short: str, long: str) -> str | None:
    """The value of ``-X value``, ``-Xvalue``, ``--long value`` or ``--long=value``
    in ``args`` (the last one given), else None."""
    found = None
    for i, arg in enumerate(args):
        if arg in (short, long):
            found = args[i + 1] if i + 1 < len(args) else None
        elif arg.startswith(long + "="):
            found = arg.partition("=")[2]
        elif arg.startswith(short) and not arg.startswith("--") and len(arg) > len(short):
            found = arg[len(short) :]
    return found


def worker_arguments(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``celery worker``'s arguments for ``airlock worker ARGS``: the operator's, and
    with ``-P gevent`` (or eventlet) and no ``-c``, ``-c 200``. Without ``-P``, Celery's
    default pool (prefork, a process per CPU): gevent is not the default while Celery
    5.6's gevent worker, after a Redis restart, takes one message every two seconds
    (celery/celery#9191, reproduced here with Celery 5.6.3 and kombu 5.6.2)."""
    given = list(args)
    if (
        option(given, "-P", "--pool") in GREEN_POOLS
        and option(given, "-c", "--concurrency") is None
    ):
        given = [*given, "-c", str(DEFAULT_CONCURRENCY)]
    return given


def usage_error(args: Sequence[str]) -> str | None:
    """What is wrong with ``args`` that Celery would take, or say less clearly."""
    for short, long in (("-c", "--concurrency"), ("-n", "--hostname"), ("-P", "--pool")):
        if args and args[-1] in (short, long):
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
