"""``airlock grants list|show|revoke``: the standing grants approvers gave (``airlock
approve --grant``, or an approval's ``grant``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from airlock.workers.cli.app import JsonOption, app, service
from airlock.workers.cli.output import console, emit, print_listing
from airlock.workers.cli.runs import acting

grants_app = typer.Typer(help="Standing grants: list, show, revoke.", no_args_is_help=True)
app.add_typer(grants_app, name="grants")


@grants_app.command("list")
def grants_list(
    all_: Annotated[bool, typer.Option("--all", help="Revoked and expired ones too.")] = False,
    agent: Annotated[str | None, typer.Option(help="Only this agent's.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 100,
    as_json: JsonOption = False,
) -> None:
    """List the grants that stand now (with --all, every grant), newest first."""
    from rich.table import Table

    from airlock.workers.service.grants import view

    svc = service()
    now = svc.grants.now()
    found = svc.grants.list(state="all" if all_ else "active", agent=agent, limit=limit)
    if as_json:
        emit({"grants": [view(g, now) for g in found]})
        return
    if not found:
        console.print("no grants" + ("" if all_ else " stand now (--all lists ended ones)"))
        return
    table = Table("id", "state", "agent", "tool", "scope", "granted by", "expires", "uses")
    for g in found:
        table.add_row(
            g.id, g.state(now), g.agent, g.tool, g.scope + (f" {g.run_id}" if g.run_id else ""),
            g.granted_by, f"{g.expires_at:%Y-%m-%d %H:%M}Z", str(g.uses),
        )  # fmt: skip
    print_listing(table)


@grants_app.command("show")
def grants_show(grant_id: str, as_json: JsonOption = False) -> None:
    """One grant, with the arguments it releases."""
    from airlock.workers.service.grants import view

    svc = service()
    shown = view(svc.grants.get(grant_id), svc.grants.now())
    if as_json:
        emit(shown)
        return
    for key, value in shown.items():
        text = json.dumps(value) if isinstance(value, dict | list) else value
        console.print(f"[bold]{key:>12}[/bold]  {'—' if value is None else text}", highlight=False)


@grants_app.command("revoke")
def grants_revoke(
    grant_id: str,
    approver: Annotated[
        str | None, typer.Option("--as", help="Who revokes; by default your OS user.")
    ] = None,
) -> None:
    """Revoke a grant: from now on it releases nothing (a release already made stands)."""
    revoked = service().grants.revoke(grant_id, by=acting(approver))
    console.print(f"grant {revoked.id} revoked ({revoked.uses} release(s) made by it)")
