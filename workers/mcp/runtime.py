"""One upstream call, and a server's catalog: what ``mcp_tools`` and the gateway share.

``call`` sends one ``tools/call`` with the idempotency key in ``_meta``
(``io.airlock/idempotency-key``) and turns the answer into the text the model reads.
An answer with ``isError`` is the tool's result. A server that cannot be reached is
tried again with backoff until the call's deadline; a call that was sent and whose
answer was lost (a dropped connection, a timeout) is sent again only when repeating it
is safe (``repeatable``: a read or an idempotent write), else the caller is told it may
have run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import anyio
from mcp import Client, MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    RequestParamsMeta,
    TextContent,
)
from pydantic import JsonValue, ValidationError

from airlock.loop import AirlockError
from airlock.workers.mcp import green, pool
from airlock.workers.mcp.catalog import Definition
from airlock.workers.mcp.config import ServerConfig
from airlock.workers.service.backoff import backoff
from airlock.workers.service.tracing import current_traceparent

IDEMPOTENCY_KEY = "io.airlock/idempotency-key"
TRACEPARENT = "traceparent"
RESULT_LIMIT = 64 * 1024
"""The most characters of a result the model reads; the rest is cut, with a note."""
PAGE_LIMIT = 50
"""The most pages of ``tools/list`` read from one server."""


class McpCallError(AirlockError):
    """An upstream call that got no usable answer; ``maybe_ran``: it was sent."""

    def __init__(self, message: str, *, maybe_ran: bool) -> None:
        super().__init__(message)
        self.maybe_ran = maybe_ran


@dataclass(frozen=True, slots=True)
class CallOutcome:
    text: str
    """What the model reads (cut to ``RESULT_LIMIT``, other content summarised)."""
    is_error: bool
    raw: dict[str, JsonValue]
    """The whole answer, as the server sent it (content blocks of every type)."""


def list_tools(server: ServerConfig, *, timeout: float | None = None) -> list[Definition]:
    """The server's tools, as listed now (asked again, within the deadline, when the
    server could not be reached or its session had died)."""

    async def listing(client: Client) -> list[Definition]:
        found: list[Definition] = []
        cursor: str | None = None
        for _ in range(PAGE_LIMIT):
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            found += [_definition(t) for t in page.tools]
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    result: list[Definition] = _attempts(
        server, listing, "tools/list", repeatable=True, deadline=timeout or server.timeout
    )
    return result


def _definition(tool: Any) -> Definition:
    dumped = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    return Definition(
        name=str(dumped.get("name", "")),
        description=str(dumped.get("description") or ""),
        input_schema=dict(dumped.get("inputSchema") or {}),
        annotations=dumped.get("annotations"),
    )


def live_fingerprint(server: ServerConfig, tool: str) -> str | None:
    """The fingerprint of ``tool`` as the server lists it now (None: it lists no such
    tool): what the drift checks compare with the pin or the review. ``McpCallError``
    when the server cannot be asked."""
    now = {d.name: d for d in list_tools(server)}.get(tool)
    return now.fingerprint() if now is not None else None


def call(
    server: ServerConfig,
    tool: str,
    arguments: dict[str, JsonValue],
    *,
    idempotency_key: str,
    repeatable: bool,
    traceparent: str | None = None,
) -> CallOutcome:
    """Call ``tool`` once (again, after a lost answer, only if ``repeatable``) within the
    server's deadline. With traces on, ``_meta`` carries the current span's
    ``traceparent`` (a segment's tool span, the gateway's request) unless one is given."""
    fields: dict[str, Any] = {IDEMPOTENCY_KEY: idempotency_key}
    traceparent = traceparent or current_traceparent()  # the calling segment's or request's
    if traceparent:
        fields[TRACEPARENT] = traceparent
    meta = cast(RequestParamsMeta, fields)  # a TypedDict that takes any extra key

    async def send(client: Client) -> CallToolResult:
        # the session's call, not ``Client.call_tool``: that one re-lists and sends again
        # when the server says the tool's schema changed (HEADER_MISMATCH), which would
        # run a tool other than the one pinned and reviewed
        return await client.session.call_tool(tool, arguments, meta=meta)

    result: CallToolResult = _attempts(
        server, send, f"tools/call of {tool!r}", repeatable=repeatable, deadline=server.timeout
    )
    return outcome_of(result)


LOST = (OSError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError)
"""A request sent whose answer was lost."""


def _attempts(
    server: ServerConfig, operation: pool.Operation[Any], what: str, *, repeatable: bool,
    deadline: float,
) -> Any:  # fmt: skip
    """``operation`` until it answers, within ``deadline`` seconds, with backoff: tried
    again when nothing was sent (the server could not be reached), or when the answer
    was lost and ``repeatable``."""
    if server.command is not None and green.green():
        raise McpCallError(
            f"MCP server {server.name!r} is a stdio server, which a gevent worker cannot "
            "start (declare it by url, or run the worker with -P prefork or -P threads)",
            maybe_ran=False,
        )
    ends = time.monotonic() + deadline
    attempt = 0
    while True:
        attempt += 1
        try:
            return pool.run(server, operation, timeout=max(ends - time.monotonic(), 0.001))
        except ValidationError as exc:
            raise McpCallError(
                f"MCP server {server.name!r} answered {what} with a malformed result",
                maybe_ran=True,
            ) from exc
        except MCPError as exc:
            if exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
                raise McpCallError(  # the server refused the request: nothing ran
                    f"MCP server {server.name!r} refused {what}: {exc.error.message}",
                    maybe_ran=False,
                ) from exc
            failure: Exception = exc
        except (*LOST, pool.McpUnavailableError) as exc:
            failure = exc
        sent = not isinstance(failure, pool.McpUnavailableError)
        pause = backoff(attempt, base=0.2, cap=2.0)
        if (sent and not repeatable) or time.monotonic() + pause >= ends:
            raise McpCallError(_why(server, failure), maybe_ran=sent) from failure
        time.sleep(pause)


def _why(server: ServerConfig, exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"MCP server {server.name!r} did not answer within {server.timeout:g} s"
    return f"MCP server {server.name!r} is unavailable: {type(exc).__name__}: {exc}"


def outcome_of(result: CallToolResult) -> CallOutcome:
    """The text the model reads: the text blocks (cut to ``RESULT_LIMIT``), then a line
    for each block of another type (``raw`` keeps them whole)."""
    raw: dict[str, JsonValue] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    others = [
        _summary(b.model_dump(mode="json", exclude_none=True))
        for b in result.content
        if not isinstance(b, TextContent)
    ]
    if not result.content and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, sort_keys=True, ensure_ascii=False))
    text = "\n".join([cut("\n".join(texts)), *others]) if others else cut("\n".join(texts))
    return CallOutcome(text, bool(result.is_error), raw)


def _summary(block: dict[str, Any]) -> str:
    kind = str(block.get("type", "unknown"))
    mime = block.get("mimeType") or block.get("mime_type")
    size = len(str(block.get("data") or block.get("blob") or ""))
    label = f"{kind}" + (f" {mime}" if mime else "")
    if "uri" in block or "resource" in block:
        uri = block.get("uri") or (block.get("resource") or {}).get("uri")
        return f"[{label}: {uri}; kept in the run's events, not shown]"
    return f"[{label}, {size} characters of data; kept in the run's events, not shown]"


def cut(text: str, limit: int = RESULT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    return (
        text[:limit]
        + f"\n[cut: the result had {len(text)} characters; the first {limit} are shown]"
    )
