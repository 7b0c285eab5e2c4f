"""How the CLI prints: tables and lines for people, JSON for scripts, errors to
stderr with the exit code that says what went wrong."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:
    from pydantic import JsonValue
    from rich.progress import Progress
    from rich.table import Table

    from airlock.workers.service import Service, Stats

console = Console()
errors = Console(stderr=True)


def print_listing(table: Table) -> None:
    """A list's table at its natural width, cut nowhere: a terminal narrower than it
    wraps its lines (as ``docker ps`` does) rather than rich cutting every cell to
    "wai…" and every id to "93243e9d…", which no command takes."""
    natural = console.measure(table, options=console.options.update(max_width=10_000))
    width = console.width
    console.width = max(width, natural.maximum)  # rich renders no wider than its console
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def without_password(url: str) -> str:
    """``url`` as it may be printed: its password, if any, shown as ``***`` (a database
    URL by SQLAlchemy's rendering, a broker URL by kombu's), and so is one in its query
    (``?password=``, which libpq and redis-py take)."""
    if "://" not in url:
        return url
    from airlock.persistence.db import hide_password, shown_url

    if url.startswith(("redis", "rediss", "amqp", "sqla+", "filesystem")):
        return hide_password(url)
    return shown_url(url)


def fail(message: str, code: int) -> NoReturn:
    # one line, however narrow the terminal: scripts and people read it whole
    errors.print(f"[red]airlock:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def emit(value: JsonValue) -> None:
    typer.echo(json.dumps(value, indent=2))


def parse_duration(text: str) -> timedelta:
    """``--older-than``: read by the one duration parser (``airlock.loop.durations``)."""
    from airlock.loop.durations import parse_seconds

    try:
        seconds = parse_seconds(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if seconds > timedelta.max.total_seconds():
        raise typer.BadParameter(f"{text!r} is longer than any duration this can count")
    return timedelta(seconds=seconds)


def seconds_or_text(value: str) -> int | str:
    return int(value) if value.isascii() and value.isdigit() else value


def grant_duration(value: str | None) -> str | None:
    """``--for``, refused (exit 2) before anything is read or decided."""
    if value is None:
        return None
    from airlock.workers.service.decisions import grant_seconds

    try:
        grant_seconds(seconds_or_text(value.strip()))
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r}: {exc}") from None
    return value.strip()


def print_turn(pending: JsonValue) -> None:
    if not isinstance(pending, dict):
        return
    from rich.table import Table

    console.print(f"[bold]{'turn':>12}[/bold]  {pending['turn_digest']}")
    table = Table("call", "tool", "effect", "needs approval", "verdict", "arguments")
    for call in pending["calls"]:  # type: ignore[union-attr]
        assert isinstance(call, dict)
        table.add_row(
            str(call["id"]), str(call["name"]), str(call["effect"]),
            "yes" if call["requires_approval"] else "no", _verdict(call),
            json.dumps(call["arguments"]),
        )  # fmt: skip
    console.print(table)


def _verdict(call: dict[str, JsonValue]) -> str:
    """The verdict, and the policy file's rule that made it, in one line."""
    policy = call.get("policy")
    rule = f" ({policy['line']})" if isinstance(policy, dict) else ""
    return f"{call['verdict']}{rule}"


def progress_bar() -> Progress:
    from rich.progress import BarColumn, Progress, TextColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        console=errors,
    )


def print_stats(figures: Stats, gateway: JsonValue = None) -> None:
    from rich.table import Table

    age = figures.oldest_waiting_seconds
    table = Table("status", "runs")
    for status, n in figures.runs.items():
        table.add_row(status.value, str(n))
    console.print(table)
    waited = "none waiting" if age is None else f"{round(age, 1)} s"
    console.print(f"oldest waiting approval: {waited}")
    console.print(f"expired leases: {figures.expired_leases}")
    for minutes, counts in figures.finished.items():
        finished = ", ".join(f"{n} {s.value}" for s, n in counts.items())
        console.print(f"finished in the last {minutes} min: {finished or 'none'}")
    due, given_up = figures.notifications_due, figures.notifications_given_up
    console.print(f"notifications: {due} due, {given_up} given up")
    if (lag := figures.notification_lag) is not None:
        console.print(
            f"notification lag (transition to 2xx, recent deliveries): "
            f"p50 {lag[0]:.3f} s, p99 {lag[1]:.3f} s"
        )
    sweeper = figures.sweeper
    if sweeper.last_run is None:
        console.print("sweeper: never ran (is `airlock beat` running?)")
    else:
        console.print(
            f"sweeper: last ran {round(sweeper.age_seconds or 0.0, 1)} s ago "
            f"({sweeper.state.value}; stale after {sweeper.stale_after.total_seconds():g} s)"
        )
    print_gateway(gateway)


def gateway_view(service: Service) -> JsonValue:
    """The MCP gateway's figures for ``airlock stats`` (None when no MCP server is
    declared): calls held now and returned, by server and tool; wait p50/p99."""
    from airlock.workers.service.settings import settings

    if settings().mcp_servers is None:
        return None
    found = service.gateway_figures()
    waits = found.waits

    def rows(of: list[tuple[str, str, int]]) -> JsonValue:
        return [{"server": s, "tool": t, "calls": n} for s, t, n in of]

    def quantile(q: float) -> JsonValue:
        return round(waits[min(int(q * len(waits)), len(waits) - 1)], 3) if waits else None

    return {
        "held": rows(found.held),
        "returned": rows(found.returned),
        "wait_p50_seconds": quantile(0.5),
        "wait_p99_seconds": quantile(0.99),
    }


def print_gateway(view: JsonValue) -> None:
    if not isinstance(view, dict):
        return
    for kind in ("held", "returned"):
        found = view[kind]
        calls = found if isinstance(found, list) else []
        listed = ", ".join(f"{c['tool']} {c['calls']}" for c in calls if isinstance(c, dict))
        console.print(f"MCP gateway calls {kind}: {listed or 'none'}")
    console.print(
        f"MCP gateway wait (ask to result): p50 {view['wait_p50_seconds']} s, "
        f"p99 {view['wait_p99_seconds']} s"
    )
