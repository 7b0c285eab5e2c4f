"""The ``airlock`` command's entry point (and ``python -m airlock.workers``).

``airlock worker`` (on Redis, ``-P gevent`` unless ``-P`` says) runs one Celery worker
whose segments wait on their models and slow tools in greenlets, so one process keeps
hundreds in flight (``-c``, default 200; see airlock.workers.cli.worker_options). gevent must patch
the standard library before anything that uses sockets, threads or ``select`` is
imported; ``celery worker`` does it in its own entry point
(``celery.maybe_patch_concurrency``), and so does this one, before it imports the rest
of Airlock. Nothing here imports more than the
standard library and that function.
"""

from __future__ import annotations

import os
import sys

from airlock.workers.cli.worker_options import usage_error, worker_arguments


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["worker"]:
        arguments = worker_arguments(argv[1:], os.environ)
        if usage_error(arguments) is None:  # else the command says what is wrong
            from celery import maybe_patch_concurrency

            # patches the standard library for -P gevent (or eventlet), as `celery worker` does
            maybe_patch_concurrency(["worker", *arguments])
    from airlock.workers.cli.commands import main as cli

    cli()


if __name__ == "__main__":
    main()
