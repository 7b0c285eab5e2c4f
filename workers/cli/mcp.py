"""``airlock mcp list|pin``: the declared MCP servers' tools, their effects, pins and
drift, and accepting a tool's new definition."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated

import typer

from airlock.workers.cli.app import JsonOption, app, service
from airlock.workers.cli.output import console, emit, errors, fail

if TYPE_CHECKING:
    from airlock.workers.mcp.config import Servers

mcp_app = typer.Typer(help="MCP servers' tools (AIRLOCK_MCP_SERVERS).", no_args_is_help=True)
app.add_typer(mcp_app, name="mcp")


def _servers() -> Servers:
    from airlock.workers.mcp.config import McpConfigError
    from airlock.workers.mcp.tools import servers

    try:
        return servers()
    except McpConfigError as exc:
        fail(str(exc), 2)


@mcp_app.command("list")
def mcp_list(as_json: JsonOption = False) -> None:
    """Each declared server's tools: effect, pinned and live fingerprints, drift."""
    from rich.table import Table

    found = service().mcp().status(_servers())
    if as_json:
        emit({"servers": [dataclasses.asdict(s) for s in found]})
        return
    table = Table("tool", "effect", "pin", "live", "drift")
    for server in found:
        if server.reachable is not None:
            console.print(f"{server.name} ({server.transport}): {server.reachable}")
        for t in server.tools:
            table.add_row(t.name, t.effect, (t.pin or "-")[:12], (t.live or "-")[:12], t.drift)
    console.print(table)


@mcp_app.command("pin")
def mcp_pin(
    server: Annotated[str, typer.Argument(help="A declared server.")],
    tool: Annotated[str | None, typer.Argument(help="One of its tools (default: all).")] = None,
) -> None:
    """Accept the server's tools (or TOOL) as it lists them now."""
    from airlock.workers.mcp.config import McpConfigError
    from airlock.workers.mcp.runtime import McpCallError

    try:
        config = _servers().get(server)
        pinned = service().mcp().pin(config, tool)
    except (McpConfigError, LookupError) as exc:
        fail(str(exc), 2)
    except McpCallError as exc:
        fail(str(exc), 1)
    for name in pinned:
        console.print(f"pinned {name}")


@app.command()
def gateway(
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Serve one local MCP client on stdin/stdout.")
    ] = False,
    name: Annotated[
        str | None,
        typer.Option("--as", help="The local operator the calls are made as [default: OS user]."),
    ] = None,
) -> None:
    """The MCP gateway for a local client (its calls judged, held and approved as
    /mcp's; the caller is the local operator, cli:<name>)."""
    from airlock.workers.cli.runs import acting
    from airlock.workers.mcp.gateway import Gateway
    from airlock.workers.mcp.server import serve_stdio
    from airlock.workers.service.settings import settings

    if not stdio:
        fail("airlock gateway serves MCP on stdin/stdout only (--stdio); airlock api serves "
             "it over HTTP at /mcp", 2)  # fmt: skip
    servers = _servers()
    principal = acting(name)
    config = settings()
    if config.embedded_broker and not config.database_url.startswith("sqlite"):
        # stdout is the MCP channel: the word goes to stderr, which clients log
        errors.print(
            "airlock gateway: AIRLOCK_BROKER_URL is not set: a held call's run is queued on "
            f"the embedded broker in {config.broker_folder.resolve()}, where your workers (on "
            f"{config.database_url.split('@')[-1]}) may not look; set AIRLOCK_BROKER_URL to "
            "their broker",
            soft_wrap=True,
        )
    found = Gateway(service(), list(servers.servers), wait=config.mcp_wait)
    serve_stdio(found, principal)
