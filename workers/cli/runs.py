"""The ``airlock`` commands on runs: start, list, show, decide, cancel, retry, purge,
stats (``events`` is ``airlock.workers.cli.events``). The service's errors are answered
by the app's table (``airlock.workers.cli.app``)."""

from __future__ import annotations

import contextlib
import getpass
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from airlock.persistence.status import GrantScope, RunStatus
from airlock.workers.cli.app import JsonOption, app, require_run, runs_app, service
from airlock.workers.cli.output import (
    console,
    emit,
    fail,
    gateway_view,
    grant_duration,
    parse_duration,
    print_listing,
    print_stats,
    print_turn,
    progress_bar,
    seconds_or_text,
)

if TYPE_CHECKING:
    from pydantic import JsonValue

    from airlock.workers.service.decisions import DecisionBody
    from airlock.workers.service.principals import Principal


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
    from airlock.workers.service.views import run_view

    meta: Any = None
    if metadata is not None:
        try:
            meta = json.loads(metadata)
        except ValueError as exc:
            raise typer.BadParameter(f"--metadata is not JSON: {exc}") from exc
        if not isinstance(meta, dict):
            raise typer.BadParameter("--metadata must be a JSON object")
    run, created = service().start_run(
        agent,
        input,
        idempotency_key=idempotency_key,
        metadata=meta,
        requested_by=requested_by,
        caller="cli",
    )
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
    from rich.table import Table

    from airlock.workers.service.views import run_view

    page = service().list_runs(status=status, agent=agent, limit=limit, cursor=cursor)
    if as_json:
        emit({"runs": [run_view(service(), r) for r in page.runs], "next_cursor": page.next_cursor})
        return
    table = Table("id", "agent", "status", "iterations", "tokens", "created", "updated")
    for r in page.runs:
        table.add_row(
            r.id, r.agent, r.status.value, str(r.iterations), str(r.usage.total_tokens),
            f"{r.created_at:%Y-%m-%d %H:%M:%S}", f"{r.updated_at:%Y-%m-%d %H:%M:%S}",
        )  # fmt: skip
    print_listing(table)
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}")


@runs_app.command("show")
def runs_show(run_id: str, as_json: JsonOption = False) -> None:
    """Show one run, and the calls waiting for approval if any."""
    from airlock.workers.service.views import run_view

    run = require_run(run_id)
    view = run_view(service(), run)
    if as_json:
        emit(view)
        return
    for key in ("id", "agent", "status", "termination", "iterations", "output", "error"):
        console.print(f"[bold]{key:>12}[/bold]  {view[key]}", highlight=False)
    usage = run.usage
    console.print(f"[bold]{'tokens':>12}[/bold]  {usage.prompt_tokens} + {usage.completion_tokens}")
    print_turn(view["pending"])


# -- decisions and operator actions -------------------------------------------------------------


def operator(name: str | None) -> Principal:
    """The CLI's principal: ``--as`` (by default the OS user), with the OS user."""
    from airlock.workers.service.principals import Principal

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
    from pydantic import ValidationError

    from airlock.workers.service.views import run_view

    run = require_run(run_id)
    if run.status is not RunStatus.WAITING_FOR_APPROVAL or run.turn_digest is None:
        fail(f"run is {run.status}, not waiting for approval", 1)
    if digest is None:
        print_turn(run_view(service(), run)["pending"])
        digest = run.turn_digest
    try:
        body, by = body_of(digest), operator(approver)
    except ValidationError as exc:  # a body the service would refuse: each field, one line
        fail("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()), 2)
    except ValueError as exc:  # a bad --as
        fail(str(exc), 2)
    result = service().record_decision(run_id, body, by)
    tally = f"{len(result.approved_by)} of {result.quorum} approvals"
    match result.result:
        case "duplicate":
            console.print("this decision was already recorded; nothing changed")
        case "partial":
            console.print(f"your approval is recorded ({tally}); the run waits for more")
        case "recorded":
            console.print(f"recorded; run {run_id} is queued to resume")
    if body.grant is not None:
        given = ", ".join(result.grants)
        console.print(f"granted: {given}" if given else "no grant was given (nothing recorded)")


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
def approve(  # noqa: PLR0917 - a command's options
    run_id: str,
    call: Annotated[
        list[str] | None,
        typer.Option("--call", help="Approve only these calls; the turn's others are denied."),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Why (for the audit).")] = None,
    approver: ApproverOption = None,
    digest: DigestOption = None,
    grant: Annotated[
        GrantScope | None,
        typer.Option(
            help="Also grant what you approve, for --for: a repeat of exactly this call "
            "(call) or this tool in this run (run) is then released without asking.",
        ),
    ] = None,
    grant_for: Annotated[
        str | None,
        typer.Option(
            "--for",
            help='With --grant: how long the grant stands (seconds, "30m", "8h", "2d"; at '
            "most 30 days) [default: 1h].",
            callback=grant_duration,
        ),
    ] = None,
) -> None:
    """Approve the turn the run waits on (or, with --call, some of its calls)."""
    if grant_for is not None and grant is None:  # else a grant the approver thinks given
        fail("--for says how long a grant stands: give --grant call|run with it", 2)

    from airlock.workers.service.decisions import CallDecisionBody, DecisionBody, GrantBody

    def body(digest: str) -> DecisionBody:
        duration = seconds_or_text(grant_for or "1h")
        given = GrantBody(scope=grant, expires_in=duration) if grant else None
        if not call:
            return DecisionBody(turn_digest=digest, decision="approve", reason=reason, grant=given)
        calls = {c: CallDecisionBody(decision="approve") for c in call}
        return DecisionBody(
            turn_digest=digest,
            decision="deny",
            reason=reason or "not selected for approval",
            calls=calls,
            grant=given,
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
    from airlock.workers.service.decisions import DecisionBody

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
    service().withdraw_approval(run_id, quoted, acting(approver))
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
    run = service().cancel(run_id, by=by)
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
    from airlock.persistence.store import UnknownRunError
    from airlock.workers.service import ConflictError

    by = acting(actor)
    if run_id is not None:
        require_run(run_id)
        service().retry(run_id, by=by)
        console.print(f"run {run_id} is queued to continue")
        return
    ids = _all_failed(agent)
    queued = 0
    with progress_bar() as progress:
        task = progress.add_task("retrying", total=len(ids))
        for rid in ids:
            # finished meanwhile, or a run of the MCP gateway's agent (never retried)
            with contextlib.suppress(ConflictError, UnknownRunError):
                service().retry(rid, by=by)
                queued += 1
            progress.advance(task)
    skipped = f" ({len(ids) - queued} not retried)" if queued < len(ids) else ""
    console.print(f"{queued} failed runs queued to continue{skipped}")


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
    """Runs by status, the oldest wait, leases, throughput, the sweeper, the MCP gateway."""
    from airlock.workers.service.views import sweeper_view

    figures = service().stats()
    age = figures.oldest_waiting_seconds
    lag = figures.notification_lag or (None, None)
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
            "lag_p50_seconds": lag[0],
            "lag_p99_seconds": lag[1],
        },
        "sweeper": sweeper_view(figures.sweeper),
        "mcp_gateway": gateway_view(service()),
    }
    if as_json:
        emit(data)
        return
    print_stats(figures, data["mcp_gateway"])
