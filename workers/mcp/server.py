"""The gateway as an MCP server: the ``mcp`` SDK's own (low-level) ``Server``, whose
``tools/list`` lists the declared servers' tools (``<server>__<tool>``, with their input
schemas) and whose ``tools/call`` is ``gateway.answer``. Each door says who calls and
how a held call waits: ``airlock api``'s ``/mcp`` (``airlock.workers.http.mcp_gateway``)
and ``airlock gateway --stdio`` (``serve_stdio``)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import JsonValue

from airlock.persistence.store.retry import is_transient
from airlock.workers.mcp.gateway import (
    Answer,
    Gateway,
    InThread,
    UnknownToolError,
    Waiter,
    answer,
)
from airlock.workers.mcp.tasks import created, serve_tasks, wants_task
from airlock.workers.mcp.tools import McpTool
from airlock.workers.service.principals import Principal

Caller = Callable[[Any], Principal]
"""The principal of a request (its context)."""
Attending = Callable[[Any], Awaitable[bool]]
"""Whether the client of a request (its context) still waits for the answer."""
Observe = Callable[[str, str, float], None]
"""Told of each answered call: the tool's full name, the outcome (``Answer.outcome``,
or ``task``: a held call answered as a task), the seconds it took."""
POLL = 0.5
"""Seconds between two reads of a held call's run, for a door without a stream hub."""


def build_server(
    gateway: Gateway,
    *,
    caller: Caller,
    in_thread: InThread,
    wait_run: Waiter,
    attending: Attending | None = None,
    observe: Observe | None = None,
) -> Server[Any]:
    in_thread = _saying_the_database_is_away(in_thread)

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing(await in_thread(gateway.tools))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        arguments: Mapping[str, JsonValue] = params.arguments or {}
        present = (lambda: attending(ctx)) if attending is not None else None
        started = time.monotonic()
        try:
            found = await answer(
                gateway, caller(ctx), params.name, arguments,
                in_thread=in_thread, wait_run=wait_run, present=present, task=wants_task(ctx),
            )  # fmt: skip
        except UnknownToolError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from exc
        if observe is not None:
            outcome = found.outcome if isinstance(found, Answer) else "task"
            observe(params.name, outcome, time.monotonic() - started)
        if isinstance(found, Answer):
            return result(found)
        return created(found.held, found.run, gateway)

    server: Server[Any] = Server(
        "airlock", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool
    )
    serve_tasks(server, gateway, caller=caller, in_thread=in_thread)
    return server


def _saying_the_database_is_away(in_thread: InThread) -> InThread:
    """A request whose database connection stayed away past the store's retries is
    answered an MCP error that says so (and that a retry may succeed), not an internal
    error."""

    async def run(work: Callable[[], Any]) -> Any:
        try:
            return await in_thread(work)
        except Exception as exc:
            if not is_transient(exc):
                raise
            raise MCPError(
                types.INTERNAL_ERROR, "the database is unavailable; retry the request"
            ) from exc

    return run


def listing(tools: list[McpTool]) -> types.ListToolsResult:
    """``tools/list``'s answer: each tool as pinned, with its input schema."""
    return types.ListToolsResult(
        tools=[
            types.Tool(
                name=t.name, description=t.description, input_schema=dict(t.definition.input_schema)
            )
            for t in tools
        ]
    )


def result(found: Answer) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=found.text)],
        is_error=found.is_error,
        _meta=found.meta or None,
    )


def polling_waiter(gateway: Gateway) -> Waiter:
    """Waits for a run to be over by reading its status every ``POLL`` seconds (in a
    thread): the stdio door's, which serves one local client."""

    async def wait_run(run_id: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            run = await anyio.to_thread.run_sync(lambda: gateway.service.get_run(run_id))
            if run.status.terminal:
                return
            await anyio.sleep(min(POLL, max(deadline - time.monotonic(), 0)))

    return wait_run


def serve_stdio(gateway: Gateway, principal: Principal) -> None:
    """Serve the gateway on this process's stdin/stdout to one local client, as
    ``principal`` (the local operator)."""

    async def in_thread(work: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(work)

    server = build_server(
        gateway,
        caller=lambda _: principal,
        in_thread=in_thread,
        wait_run=polling_waiter(gateway),
    )

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
