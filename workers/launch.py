"""The ``airlock`` command's entry point (and ``python -m workers``).

``airlock worker`` runs one Celery worker whose pool, by default on a broker server,
is gevent's: a segment that waits on a model or a slow tool waits in a greenlet, so one
process keeps hundreds in flight (``-c``, default ``DEFAULT_CONCURRENCY``). gevent
must patch the standard library before anything that uses sockets, threads or
``select`` is imported; ``celery worker`` does it in its own entry point
(``celery.maybe_patch_concurrency``), and so does this one, before it imports the
rest of Airlock. Nothing here imports more than the standard library and that function.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

DEFAULT_POOL = "gevent"
DEFAULT_CONCURRENCY = 200
"""Segments one worker process keeps in flight, by default: they wait on their models
in greenlets, and borrow a database connection only for each statement (the
process holds ``AIRLOCK_DB_POOL_SIZE`` per pool at most)."""
EMBEDDED_BROKER = "filesystem://"


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
    """``celery worker``'s arguments for ``airlock worker ARGS``: the operator's, with
    the defaults added where they gave none. On a broker server: ``-P gevent`` and
    ``-c 200`` (a ``-P`` of theirs keeps Celery's own ``-c`` default for it). On the
    embedded broker (no server; its file transport is made for one consumer that polls),
    Celery's default pool."""
    given = list(args)
    embedded = env.get("AIRLOCK_BROKER_URL", EMBEDDED_BROKER).startswith(EMBEDDED_BROKER)
    if option(given, "-P", "--pool") is None and not embedded:
        given = ["-P", DEFAULT_POOL, *given]
        if option(given, "-c", "--concurrency") is None:
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


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["worker"]:
        arguments = worker_arguments(argv[1:], os.environ)
        from celery import maybe_patch_concurrency  # noqa: PLC0415 - before anything else

        # patches the standard library for -P gevent (or eventlet), as `celery worker` does
        maybe_patch_concurrency(["worker", *arguments])
    from workers.cli import main as cli  # noqa: PLC0415 - after the patches

    cli()


if __name__ == "__main__":
    main()
