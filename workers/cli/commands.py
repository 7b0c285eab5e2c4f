"""The ``airlock`` command: a thin shell over the service layer. Here the commands
that run Airlock's processes and its schema (db, worker, beat, health, api, demo, dev)
and ``main``; the commands on runs are in ``airlock.workers.cli.runs``, and the app, its answer
table and exit codes in ``airlock.workers.cli.app``."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from airlock.workers.cli import events, grants, mcp, policy, runs
from airlock.workers.cli.app import (
    NOT_READY,
    PASSTHROUGH,
    STREAMS_GRACE,
    app,
    db_app,
    one_line,
    service,
)
from airlock.workers.cli.output import console, errors, fail, without_password

__all__ = ["app", "events", "grants", "main", "mcp", "policy", "runs", "service"]

# -- schema and processes -----------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to AIRLOCK_DATABASE_URL (default: sqlite:///./airlock.db)."""
    from airlock.persistence import schema
    from airlock.workers.service.settings import settings

    url = settings().database_url
    if (problem := schema.upgrade_or_explain(url, revision)) is not None:
        fail(problem, NOT_READY)
    typer.echo(f"database {without_password(url)} upgraded to {revision}")


@db_app.command("recount")
def db_recount() -> None:
    """Count the runs per status again and set the tallies that `airlock stats`,
    `/metrics` and the queue's stream read (a repair: the database keeps them exact)."""
    counts = service().recount()
    typer.echo("recounted: " + ", ".join(f"{s.value} {n}" for s, n in counts.items()))


@app.command(context_settings=PASSTHROUGH)
def worker(ctx: typer.Context) -> None:
    """Run a Celery worker (extra arguments go to `celery worker`, e.g. -l info). It
    consumes the segments' queue and the notifications' (-Q names others). On Redis,
    unless -P says, it runs -P gevent (-c 200 unless given): one process keeps hundreds
    of segments in flight while they wait on their models. On the embedded broker,
    Celery's default pool (prefork). More processes: more replicas of this command."""
    import click  # Celery's command line is click's

    from airlock.workers.cli.worker_options import pool_of, usage_error, worker_arguments

    if (error := usage_error(ctx.args)) is not None:
        fail(error, 2)
    arguments = worker_arguments(ctx.args, os.environ)
    if pool_of(arguments) in ("gevent", "eventlet") and not _patched(pool_of(arguments)):
        fail(
            f"the {pool_of(arguments)} pool needs the standard library patched before "
            "Airlock is imported: start the worker as `airlock worker` or "
            "`python -m airlock.workers worker`, not `python -m airlock.workers.cli.commands`",
            2,
        )
    from airlock.workers.tasks import app as celery  # with its tasks and steps

    try:
        celery.worker_main(["worker", *arguments])
    except click.UsageError as exc:  # an option celery worker does not know, say
        fail(f"celery worker: {exc.format_message()}", 2)


def _patched(pool: str | None) -> bool:
    if pool == "gevent":
        from gevent import monkey  # type: ignore[import-untyped]

        return bool(monkey.is_module_patched("socket"))
    from eventlet import patcher  # type: ignore[import-not-found]

    return bool(patcher.is_monkey_patched("socket"))


@app.command(context_settings=PASSTHROUGH)
def beat(ctx: typer.Context) -> None:
    """Run Celery beat: the sweeper, approval expiry and retention purge. Its schedule
    file is AIRLOCK_HOME/celerybeat-schedule unless -s names another; its folder is
    created."""
    from airlock.workers.cli.worker_options import option
    from airlock.workers.service.settings import settings

    given = option(ctx.args, "-s", "--schedule")
    folder = (Path(given) if given else settings().beat_schedule).absolute().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError as exc:
        one_line(f"cannot create {folder} for beat's schedule file: {exc.strerror}", 2)
    if not writable:
        one_line(f"cannot write beat's schedule file in {folder}: permission denied", 2)
    from airlock.workers.tasks import app as celery  # with its tasks and steps

    celery.start(["beat", *ctx.args])


@app.command()
def health(
    role: Annotated[str, typer.Argument(help="worker, beat or api.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for an answer.")] = 5.0,
) -> None:
    """Whether this host's ROLE is healthy, for container healthchecks: exit 0 or 1 with
    one line. worker: a node on this host answers a ping over the broker, and the
    database is ready. beat: the database is ready and the sweeper ran recently (or beat
    saved its schedule recently). api: GET /readyz on 127.0.0.1:AIRLOCK_API_PORT answers
    200. The database is only read (an SQLite file is opened read-only, and one that is
    not there is not made)."""
    checks = {"worker": _worker_health, "beat": _beat_health, "api": _api_health}
    if role not in checks:
        one_line(f"health: no role {role!r} (worker, beat or api)", 2)
    try:
        healthy, line = checks[role](timeout)
    except Exception as exc:
        healthy, line = False, f"{type(exc).__name__}: {exc}".replace("\n", " ")
    typer.echo(f"{role}: {line}")
    raise typer.Exit(0 if healthy else 1)


def _worker_health(timeout: float) -> tuple[bool, str]:
    from airlock.workers.tasks.broker import nodes_of_this_host

    nodes = nodes_of_this_host(timeout)
    if not nodes:
        return False, f"no worker on {socket.gethostname()} answered a ping in {timeout:g} s"
    if (problem := _database_problem()) is not None:
        return False, f"{', '.join(nodes)} answered, but {problem}"
    return True, f"{', '.join(nodes)} answered, and the database is ready"


def _database_problem() -> str | None:
    """What is wrong with the database, in one line naming it (None: it is ready)."""
    from airlock.persistence import schema
    from airlock.workers.service.settings import settings

    status = schema.check_url(settings().database_url)
    return None if status.ready else status.problem


def _beat_health(timeout: float) -> tuple[bool, str]:
    from airlock.workers.service import SweeperState
    from airlock.workers.service.settings import settings

    del timeout
    if (problem := _database_problem()) is not None:
        return False, problem
    sweeper = service().sweeper()
    if sweeper.state is SweeperState.OK:
        return True, f"the sweeper ran {sweeper.age_seconds:.0f} s ago"
    schedule = settings().beat_schedule
    saved = [p.stat().st_mtime for p in schedule.parent.glob(schedule.name + "*")]
    age = time.time() - max(saved) if saved else None
    if age is not None and age <= sweeper.stale_after.total_seconds():
        return True, f"beat saved its schedule {age:.0f} s ago (the sweeper: {sweeper.state})"
    ran = "never ran" if sweeper.age_seconds is None else f"ran {sweeper.age_seconds:.0f} s ago"
    return False, f"the sweeper {ran} and beat saved no schedule lately"


def _api_health(timeout: float) -> tuple[bool, str]:
    import httpx

    from airlock.workers.service.settings import settings

    url = f"http://127.0.0.1:{settings().api_port}/readyz"
    answer = httpx.get(url, timeout=timeout)
    if answer.status_code != 200:
        return False, f"{url} answered {answer.status_code}: {answer.text[:200]}"
    return True, f"{url} answered 200"


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int | None, typer.Option(help="Port to listen on [default: AIRLOCK_API_PORT, 8000].")
    ] = None,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
    access_log: Annotated[
        bool,
        typer.Option(
            help="Log every request, in uvicorn's own format (a client that polls a run "
            "logs each poll); off, errors are still logged."
        ),
    ] = False,
) -> None:
    """Serve the HTTP API (airlock.workers.api:app) with uvicorn."""
    import uvicorn

    from airlock.workers.service.settings import settings

    port = settings().api_port if port is None else port
    uvicorn.run(
        "airlock.workers.api:app",
        host=host,
        port=port,
        workers=workers,
        access_log=access_log,
        timeout_graceful_shutdown=STREAMS_GRACE,
    )


@app.command()
def demo() -> NoReturn:
    """The whole story on embedded defaults, in a temporary folder, with no server:
    enqueue → wait → signed approval → resume → done, with the event stream."""
    from airlock.workers.cli.demo import run_demo

    _stop_on_sigterm()
    raise typer.Exit(run_demo(console))


@app.command()
def dev(
    port: Annotated[int, typer.Option(help="API port.")] = 8000,
    new_secrets: Annotated[
        bool,
        typer.Option(
            "--new-secrets",
            help="Replace the API token and webhook secret kept in $AIRLOCK_HOME/dev.env.",
        ),
    ] = False,
) -> NoReturn:
    """API + worker + beat in one command on embedded defaults (./airlock.db, ./.airlock).
    The API token and webhook secret are kept in $AIRLOCK_HOME/dev.env across restarts
    (AIRLOCK_API_TOKEN and AIRLOCK_WEBHOOK_SECRET set in the environment win)."""
    from airlock.workers.cli.demo import run_dev

    _stop_on_sigterm()
    try:
        code = run_dev(console, port, new_secrets=new_secrets)
    except KeyboardInterrupt:  # Ctrl-C: uvicorn raises it again once its server stopped
        code = 0
    except SystemExit as exc:  # kill: _stop_on_sigterm
        code = exc.code if isinstance(exc.code, int) else 1
    _leave(code)


def _leave(code: int) -> NoReturn:
    """Ends ``airlock dev`` once it has stopped what it started (its worker and beat,
    its API): its output flushed, the process exits without the interpreter's teardown of
    everything the API loaded, which took 1-2 s of a Ctrl-C on a busy host and freed
    nothing the system does not (the database's changes are committed; SQLite keeps its
    write-ahead log for the next opening)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _stop_on_sigterm() -> None:
    """SIGTERM (``kill``) ends the command as Ctrl-C does: through its cleanups, which
    stop the worker and beat it started (in sessions of their own). Python's default
    ends the process at once, and so does uvicorn, which raises the signal again once
    its server has stopped."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


# -- runs -----------------------------------------------------------------------------------


def main() -> None:
    try:
        app()
    except Exception as exc:
        if (answer := _answer(exc)) is None:
            raise
        code, problem = answer
        errors.print(f"[red]airlock:[/red] {problem}", highlight=False, soft_wrap=True)
        raise SystemExit(code) from exc


def _answer(exc: Exception) -> tuple[int, str] | None:
    """Bad configuration (exit 2), or a database that went or whose schema changed under
    the command (exit 3), in one line; None for anything else (imported once a command
    failed: by then it has loaded them)."""
    if "airlock.persistence.db" not in sys.modules:  # nor can any of them have been raised
        return None
    from sqlalchemy.exc import DBAPIError, OperationalError

    from airlock.persistence import schema
    from airlock.persistence.db import ConfigurationError

    if isinstance(exc, ConfigurationError):
        return 2, str(exc)
    if not isinstance(exc, DBAPIError):
        return None
    if schema.is_schema_error(exc):
        return NOT_READY, "the database's schema is not this version's: run `airlock db upgrade`"
    if isinstance(exc, OperationalError):
        return NOT_READY, f"the database failed: {schema.first_line(exc)}"
    return None


if __name__ == "__main__":
    main()
