"""``airlock runs events RUN``: what a run did, for people (a table: the time with its
date, the event's kind, one line of what it says) and for scripts (``--json``: the
events as ``GET /v1/runs/{id}/events`` gives them); ``--follow`` as they come."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from airlock.workers.cli.app import JsonOption, require_run, runs_app, service
from airlock.workers.cli.output import console, emit, fail

if TYPE_CHECKING:
    from airlock.persistence.domain import RunEvent

FOLLOW_EVERY = 0.5
"""Seconds between two reads of a followed run's new events."""

SUMMARY_WIDTH = 120

SUMMARY_WIDTH = 120

FollowOption = Annotated[
    bool,
    typer.Option(
        "--follow",
        "-f",
        help="Print the run's events as they come, until it ends (with --json, one JSON "
        "object a line).",
    ),
]


@runs_app.command("events")
def runs_events(run_id: str, as_json: JsonOption = False, follow: FollowOption = False) -> None:
    """The run's audit stream: a table (time in UTC, kind, what happened); --json for
    the events as the HTTP API gives them."""
    from rich.table import Table

    from airlock.workers.service.views import event_view

    require_run(run_id)
    if follow:
        follow_events(run_id, as_json=as_json)
        return
    events = service().events(run_id)
    if as_json:
        emit([event_view(e) for e in events])
        return
    table = Table()
    for column in ("seq", "time (UTC)", "kind"):
        table.add_column(column, no_wrap=True)
    table.add_column("what happened", ratio=1)  # wraps in its cell in a narrow terminal
    for e in events:
        table.add_row(str(e.seq), when(e.created_at), e.kind, summary(e))
    console.print(table)


def when(at: datetime) -> str:
    """A moment with its date, in UTC, to the millisecond."""
    moment = at.astimezone(UTC) if at.tzinfo else at
    return f"{moment:%Y-%m-%d %H:%M:%S}.{moment.microsecond // 1000:03d}"


def summary(event: RunEvent) -> str:
    """What the event says, on one line."""
    from airlock.workers.service.views import clip, event_summary

    return clip(event_summary(event.kind, event.payload), SUMMARY_WIDTH)


def follow_events(run_id: str, *, as_json: bool) -> None:
    """Every event of the run, each once and in order, as they come, until the run is
    over and its last event printed (exit 4 if it is purged meanwhile)."""
    from airlock.workers.service.views import event_view

    reads, after = service(), 0
    while True:
        # the head first: a run over by then has all its events in the read that follows
        head = reads.stream_heads([run_id]).get(run_id)
        if head is None:
            fail(f"run {run_id} was purged while it was followed", 4)
        for e in reads.events(run_id, after=after):
            after = e.seq
            if as_json:
                typer.echo(json.dumps(event_view(e)))
            else:
                line = f"{e.seq:>4}  {when(e.created_at)}  {e.kind:<10} {summary(e)}"
                console.print(line, highlight=False, markup=False, soft_wrap=True)
        if head.status.terminal and after >= head.last_seq:
            return
        time.sleep(FOLLOW_EVERY)
