"""The ``airlock`` command: a thin shell over the service layer.

Exit codes: 0 done · 1 refused (the run is not in a state that allows it) ·
2 bad usage or configuration · 3 the database is not ready (no tables, a schema behind
or ahead of this version's, or a database that cannot be reached) · 4 no such run.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import signal
import socket
import time
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import JsonValue
from rich.table import Table
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from loop import DecisionError, StateError
from persistence import schema
from persistence.db import ConfigurationError
from persistence.domain import Run, RunStatus
from persistence.store import BadCursorError, UnknownRunError
from workers.cli_output import (
    console,
    emit,
    errors,
    fail,
    parse_duration,
    print_stats,
    print_turn,
    progress_bar,
)
from workers.decisions import CallDecisionBody, DecisionBody
from workers.principals import ForbiddenError, Principal
from workers.registry import UnknownAgentError
from workers.service import ConflictError, Service, SweeperState
from workers.settings import settings
from workers.views import event_view, run_view, sweeper_view

ROOT = Path(__file__).resolve().parent.parent

app = typer.Typer(
    name="airlock",
    help="Durable, human-approved LLM agent tool calls on Celery.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)
runs_app = typer.Typer(help="Inspect runs.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(runs_app, name="runs")

PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


NOT_READY = 3
"""The exit code of a command whose database is not ready for it."""


def service() -> Service:
    """The service, once the database is known to be this version's: before that,
    nothing is built (no SQLite file, no broker folder is made by a command that fails)."""
    ready_database()
    from workers.wiring import service as build  # noqa: PLC0415 - wiring on demand

    return build()


@lru_cache(maxsize=1)
def ready_database() -> None:
    """Exit 3, saying in one line what is wrong and what fixes it, unless the
    database's schema is this version's."""
    status = schema.check_url(settings().database_url)
    if not status.ready:
        fail(status.problem, NOT_READY)


def require_run(run_id: str) -> Run:
    try:
        return service().get_run(run_id)
    except UnknownRunError as exc:
        fail(str(exc), 4)


# -- schema and processes -----------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to AIRLOCK_DATABASE_URL (default: sqlite:///./airlock.db)."""
    url = settings().database_url
    if (problem := schema.upgrade_or_explain(url, revision)) is not None:
        fail(problem, NOT_READY)
    shown = make_url(url).render_as_string(hide_password=True)
    typer.echo(f"database {shown} upgraded to {revision}")


@app.command(context_settings=PASSTHROUGH)
def worker(ctx: typer.Context) -> None:
    """Run a Celery worker (extra arguments go to `celery worker`, e.g. -l info). It
    consumes the segments' queue and the notifications' (-Q names others). On Redis,
    unless -P says, it runs -P gevent (-c 200 unless given): one process keeps hundreds
    of segments in flight while they wait on their models. On the embedded broker,
    Celery's default pool (prefork). More processes: more replicas of this command."""
    import click  # noqa: PLC0415 - Celery's command line is click's

    from workers.worker_options import pool_of, usage_error, worker_arguments  # noqa: PLC0415

    if (error := usage_error(ctx.args)) is not None:
        fail(error, 2)
    arguments = worker_arguments(ctx.args, os.environ)
    if pool_of(arguments) in ("gevent", "eventlet") and not _patched(pool_of(arguments)):
        fail(
            f"the {pool_of(arguments)} pool needs the standard library patched before "
            "Airlock is imported: start the worker as `airlock worker` or "
            "`python -m workers worker`, not `python -m workers.cli`",
            2,
        )
    from workers import wiring  # noqa: F401, PLC0415 - load Celery on demand
    from workers.celery_app import app as celery  # noqa: PLC0415

    try:
        celery.worker_main(["worker", *arguments])
    except click.UsageError as exc:  # an option celery worker does not know, say
        fail(f"celery worker: {exc.format_message()}", 2)


def _patched(pool: str | None) -> bool:
    if pool == "gevent":
        from gevent import monkey  # type: ignore[import-untyped]  # noqa: PLC0415

        return bool(monkey.is_module_patched("socket"))
    from eventlet import patcher  # type: ignore[import-not-found]  # noqa: PLC0415

    return bool(patcher.is_monkey_patched("socket"))


@app.command(context_settings=PASSTHROUGH)
def beat(ctx: typer.Context) -> None:
    """Run Celery beat: the sweeper, approval expiry and retention purge. Its schedule
    file is AIRLOCK_HOME/celerybeat-schedule unless -s names another; its folder is
    created."""
    from workers.worker_options import option  # noqa: PLC0415

    given = option(ctx.args, "-s", "--schedule")
    folder = (Path(given) if given else settings().beat_schedule).absolute().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK)
    except OSError as exc:
        one_line(f"cannot create {folder} for beat's schedule file: {exc.strerror}", 2)
    if not writable:
        one_line(f"cannot write beat's schedule file in {folder}: permission denied", 2)
    from workers import wiring  # noqa: F401, PLC0415 - load Celery on demand
    from workers.celery_app import app as celery  # noqa: PLC0415

    celery.start(["beat", *ctx.args])


def one_line(message: str, code: int) -> NoReturn:
    """``message`` on one line of stderr, however long (for logs and healthchecks)."""
    typer.echo(f"airlock: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def health(
    role: Annotated[str, typer.Argument(help="worker, beat or api.")],
    timeout: Annotated[float, typer.Option(help="Seconds to wait for an answer.")] = 5.0,
) -> None:
    """Whether this host's ROLE is healthy, for container healthchecks: exit 0 or 1 with
    one line. worker: a node on this host answers a ping over the broker. beat: the
    sweeper ran recently (or beat saved its schedule recently). api: GET /readyz on
    127.0.0.1:AIRLOCK_API_PORT answers 200."""
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
    from workers.celery_app import nodes_of_this_host  # noqa: PLC0415

    nodes = nodes_of_this_host(timeout)
    if not nodes:
        return False, f"no worker on {socket.gethostname()} answered a ping in {timeout:g} s"
    return True, f"{', '.join(nodes)} answered"


def _beat_health(timeout: float) -> tuple[bool, str]:
    del timeout
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
    import httpx  # noqa: PLC0415

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
    """Serve the HTTP API (workers.api:app) with uvicorn."""
    import uvicorn  # noqa: PLC0415 - load the server on demand

    port = settings().api_port if port is None else port
    uvicorn.run("workers.api:app", host=host, port=port, workers=workers, access_log=access_log)


@app.command()
def demo() -> NoReturn:
    """The whole story on embedded defaults, in a temporary folder, with no server:
    enqueue → wait → signed approval → resume → done, with the event stream."""
    from workers.demo import run_demo  # noqa: PLC0415

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
    from workers.demo import run_dev  # noqa: PLC0415

    _stop_on_sigterm()
    raise typer.Exit(run_dev(console, port, new_secrets=new_secrets))


def _stop_on_sigterm() -> None:
    """SIGTERM (``kill``) ends the command as Ctrl-C does: through its cleanups, which
    stop the worker and beat it started (in sessions of their own). Python's default
    ends the process at once, and so does uvicorn, which raises the signal again once
    its server has stopped."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


# -- runs -----------------------------------------------------------------------------------


@app.command("run")
def start_run(  # noqa: PLR0917 - a command's options
    agent: Annotated[str, typer.Argument(help="Agent name (see AIRLOCK_AGENTS).")],
    input: Annotated[str, typer.Argument(help="The user's request.")],
    idempotency_key: Annotated[str | None, typer.Option(help="Same key, same run.")] = None,
    metadata: Annotated[str | None, typer.Option(help="A JSON object to attach.")] = None,
    requested_by: Annotated[
        str | None,
        typer.Option(help="Who asks for the run (by default they may not approve its calls)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Enqueue a run of AGENT on INPUT."""
    meta: Any = None
    if metadata is not None:
        try:
            meta = json.loads(metadata)
        except ValueError as exc:
            raise typer.BadParameter(f"--metadata is not JSON: {exc}") from exc
        if not isinstance(meta, dict):
            raise typer.BadParameter("--metadata must be a JSON object")
    try:
        run, created = service().start_run(
            agent,
            input,
            idempotency_key=idempotency_key,
            metadata=meta,
            requested_by=requested_by,
            caller="cli",
        )
    except UnknownAgentError as exc:
        fail(str(exc), 2)
    except ConflictError as exc:  # the key was used for another request
        fail(str(exc), 1)
    if as_json:
        emit(run_view(service(), run))
    else:
        verb = "queued" if created else "already exists (same idempotency key)"
        console.print(f"run [bold]{run.id}[/bold] {verb}")


@runs_app.command("list")
def runs_list(
    status: Annotated[RunStatus | None, typer.Option(help="Only runs with this status.")] = None,
    agent: Annotated[str | None, typer.Option(help="Only runs of this agent.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    cursor: Annotated[str | None, typer.Option(help="From a previous page.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first (filters as in GET /v1/runs)."""
    try:
        page = service().list_runs(status=status, agent=agent, limit=limit, cursor=cursor)
    except BadCursorError as exc:
        fail(str(exc), 2)
    if as_json:
        emit({"runs": [run_view(service(), r) for r in page.runs], "next_cursor": page.next_cursor})
        return
    table = Table("id", "agent", "status", "iterations", "tokens", "created", "updated")
    for r in page.runs:
        table.add_row(
            r.id, r.agent, r.status.value, str(r.iterations), str(r.usage.total_tokens),
            f"{r.created_at:%Y-%m-%d %H:%M:%S}", f"{r.updated_at:%Y-%m-%d %H:%M:%S}",
        )  # fmt: skip
    console.print(table)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}")


@runs_app.command("show")
def runs_show(run_id: str, as_json: JsonOption = False) -> None:
    """Show one run, and the calls waiting for approval if any."""
    run = require_run(run_id)
    try:
        view = run_view(service(), run)
    except StateError as exc:
        fail(str(exc), 1)
    if as_json:
        emit(view)
        return
    for key in ("id", "agent", "status", "termination", "iterations", "output", "error"):
        console.print(f"[bold]{key:>12}[/bold]  {view[key]}", highlight=False)
    usage = run.usage
    console.print(f"[bold]{'tokens':>12}[/bold]  {usage.prompt_tokens} + {usage.completion_tokens}")
    print_turn(view["pending"])


@runs_app.command("events")
def runs_events(run_id: str, as_json: JsonOption = False) -> None:
    """The run's audit stream."""
    require_run(run_id)
    events = service().events(run_id)
    if as_json:
        emit([event_view(e) for e in events])
        return
    table = Table("seq", "kind", "at", "payload")
    for e in events:
        table.add_row(
            str(e.seq), e.kind, f"{e.created_at:%H:%M:%S.%f}", json.dumps(e.payload)[:120]
        )
    console.print(table)


# -- decisions and operator actions -------------------------------------------------------------


def operator(name: str | None) -> Principal:
    """The CLI's principal: ``--as`` (by default the OS user), with the OS user."""
    os_user = getpass.getuser()
    return Principal.operator(name or os_user, os_user=os_user)


def acting(name: str | None) -> Principal:
    """The operator who cancels or retries (``operator``); exit 2 for a bad ``--as``."""
    try:
        return operator(name)
    except ValueError as exc:
        fail(str(exc), 2)


def _decide(run_id: str, body_of: Any, approver: str | None, digest: str | None) -> None:
    """Decide the turn quoted by ``digest``; without one, the turn that waits now, which
    is shown first, so the operator sees what the decision releases."""
    run = require_run(run_id)
    if run.status is not RunStatus.WAITING_FOR_APPROVAL or run.turn_digest is None:
        fail(f"run is {run.status}, not waiting for approval", 1)
    if digest is None:
        try:
            print_turn(run_view(service(), run)["pending"])
        except StateError as exc:
            fail(str(exc), 1)
        digest = run.turn_digest
    try:
        result = service().record_decision(run_id, body_of(digest), operator(approver))
    except (DecisionError, ValueError) as exc:
        fail(str(exc), 2)
    except (ConflictError, ForbiddenError) as exc:
        fail(str(exc), 1)
    tally = f"{len(result.approved_by)} of {result.quorum} approvals"
    match result.result:
        case "duplicate":
            console.print("this decision was already recorded; nothing changed")
        case "partial":
            console.print(f"your approval is recorded ({tally}); the run waits for more")
        case "recorded":
            console.print(f"recorded; run {run_id} is queued to resume")


ApproverOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        "--approver",
        help="Who decides (recorded with your OS user); by default your OS user.",
    ),
]
DigestOption = Annotated[
    str | None,
    typer.Option(
        "--digest",
        help="The turn digest you reviewed (runs show); refused if another turn waits now.",
    ),
]


@app.command()
def approve(
    run_id: str,
    call: Annotated[
        list[str] | None,
        typer.Option("--call", help="Approve only these calls; the turn's others are denied."),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Why (for the audit).")] = None,
    approver: ApproverOption = None,
    digest: DigestOption = None,
) -> None:
    """Approve the turn the run waits on (or, with --call, some of its calls)."""

    def body(digest: str) -> DecisionBody:
        if not call:
            return DecisionBody(turn_digest=digest, decision="approve", reason=reason)
        calls = {c: CallDecisionBody(decision="approve") for c in call}
        return DecisionBody(
            turn_digest=digest,
            decision="deny",
            reason=reason or "not selected for approval",
            calls=calls,
        )

    _decide(run_id, body, approver, digest)


@app.command()
def deny(
    run_id: str,
    reason: Annotated[str, typer.Option(help="Why; the model is told.")],
    approver: ApproverOption = None,
    digest: DigestOption = None,
) -> None:
    """Deny the turn the run waits on; every pending call gets the denial as its result."""
    _decide(
        run_id,
        lambda quoted: DecisionBody(turn_digest=quoted, decision="deny", reason=reason),
        approver,
        digest,
    )


@app.command()
def withdraw(run_id: str, approver: ApproverOption = None, digest: DigestOption = None) -> None:
    """Withdraw your approval of the turn the run waits on, before its quorum is reached."""
    run = require_run(run_id)
    quoted = digest or run.turn_digest
    if run.status is not RunStatus.WAITING_FOR_APPROVAL or quoted is None:
        fail(f"run is {run.status}, not waiting for approval", 1)
    try:
        service().withdraw_approval(run_id, quoted, operator(approver))
    except ValueError as exc:
        fail(str(exc), 2)
    except ConflictError as exc:
        fail(str(exc), 1)
    console.print("your approval is withdrawn; the run waits for approvals")


ActorOption = Annotated[
    str | None,
    typer.Option("--as", help="Who acts (recorded with your OS user); by default your OS user."),
]


@app.command()
def cancel(run_id: str, actor: ActorOption = None) -> None:
    """Cancel a run that has not finished."""
    require_run(run_id)
    by = acting(actor)
    try:
        run = service().cancel(run_id, by=by)
    except ConflictError as exc:
        fail(str(exc), 1)
    console.print(f"run {run.id} is {run.status}")


@app.command()
def retry(
    run_id: Annotated[str | None, typer.Argument(help="A failed run.")] = None,
    all_failed: Annotated[bool, typer.Option("--all-failed", help="Every failed run.")] = False,
    agent: Annotated[str | None, typer.Option(help="With --all-failed: one agent's.")] = None,
    actor: ActorOption = None,
) -> None:
    """Continue a failed run from its last checkpoint (calls already made are not repeated)."""
    if (run_id is None) == (not all_failed):
        raise typer.BadParameter("give a RUN_ID or --all-failed")
    by = acting(actor)
    if run_id is not None:
        require_run(run_id)
        try:
            service().retry(run_id, by=by)
        except ConflictError as exc:
            fail(str(exc), 1)
        console.print(f"run {run_id} is queued to continue")
        return
    ids = _all_failed(agent)
    with progress_bar() as progress:
        task = progress.add_task("retrying", total=len(ids))
        for rid in ids:
            with contextlib.suppress(ConflictError, UnknownRunError):  # finished meanwhile
                service().retry(rid, by=by)
            progress.advance(task)
    console.print(f"{len(ids)} failed runs queued to continue")


def _all_failed(agent: str | None) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = service().list_runs(status=RunStatus.FAILED, agent=agent, limit=500, cursor=cursor)
        ids += [r.id for r in page.runs]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


@app.command()
def purge(
    older_than: Annotated[
        str, typer.Option(help="Finished runs idle this long: 30d, 12h, 90m…")
    ] = "30d",
) -> None:
    """Delete finished runs (and their events) whose last activity is older than the window."""
    window = parse_duration(older_than)
    runs = service()
    with progress_bar() as progress:
        task = progress.add_task("purging", total=None)
        removed = runs.purge(window, progress=lambda n: progress.update(task, completed=n))
    console.print(f"removed {removed} finished runs idle for more than {older_than}")


@app.command()
def stats(as_json: JsonOption = False) -> None:
    """Runs by status, the oldest waiting approval, expired leases, recent throughput,
    and when beat's sweeper last ran."""
    figures = service().stats()
    age = figures.oldest_waiting_seconds
    data: dict[str, JsonValue] = {
        "runs": {s.value: n for s, n in figures.runs.items()},
        "oldest_waiting_seconds": round(age, 1) if age is not None else None,
        "expired_leases": figures.expired_leases,
        "finished": {
            f"last_{minutes}m": {s.value: n for s, n in counts.items()}
            for minutes, counts in figures.finished.items()
        },
        "notifications": {
            "due": figures.notifications_due,
            "given_up": figures.notifications_given_up,
        },
        "sweeper": sweeper_view(figures.sweeper),
    }
    if as_json:
        emit(data)
        return
    print_stats(figures)


def main() -> None:
    try:
        app()
    except ConfigurationError as exc:
        errors.print(f"[red]airlock:[/red] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(2) from exc
    except DBAPIError as exc:  # the database went, or its schema changed, under the command
        if schema.is_schema_error(exc):
            problem = "the database's schema is not this version's: run `airlock db upgrade`"
        elif isinstance(exc, OperationalError):
            problem = f"the database failed: {schema.first_line(exc)}"
        else:
            raise
        errors.print(f"[red]airlock:[/red] {problem}", highlight=False, soft_wrap=True)
        raise SystemExit(NOT_READY) from exc


if __name__ == "__main__":
    main()
