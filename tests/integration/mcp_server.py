"""A real MCP server for the tests, built with the SDK's ``MCPServer``: run it as
``python -m tests.integration.mcp_server http PORT`` (Streamable HTTP) or ``stdio``.

Every call of a tool appends ``<tool> <idempotency key>`` to ``$BANK_LOG``, so a test
counts, across processes, how often the server really ran each call. ``$BANK_VARIANT``
changes ``transfer``'s schema (drift). ``$BANK_HANG_ONCE``: the first call of each key to
``transfer`` or ``deposit`` is counted, then hangs (its caller is killed meanwhile).
``$BANK_SLOW``: each such call is counted (its effect happened), then answers that many
seconds later."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations

app = MCPServer("bank")
VARIANT = os.environ.get("BANK_VARIANT", "1")


def _count(tool: str, ctx: Context[Any, Any]) -> int:
    meta = ctx.request_context.meta or {}
    key = str(meta.get("io.airlock/idempotency-key"))
    log = Path(os.environ["BANK_LOG"])
    with log.open("a") as fh:
        fh.write(f"{tool} {key}\n")
    return log.read_text().splitlines().count(f"{tool} {key}")


async def _hang_first(count: int) -> None:
    if os.environ.get("BANK_HANG_ONCE") and count == 1:
        await anyio.sleep(120)
    await anyio.sleep(float(os.environ.get("BANK_SLOW") or 0))


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def balance(account: str, ctx: Context[Any, Any]) -> str:
    """The balance of an account."""
    _count("balance", ctx)
    return f"{account}: 100 EUR"


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def audit(account: str, ctx: Context[Any, Any]) -> str:
    """Annotated read-only, declared a write by the operator."""
    _count("audit", ctx)
    return f"audited {account}"


async def transfer(to: str, amount: int, ctx: Context[Any, Any], memo: str = "") -> str:
    await _hang_first(_count("transfer", ctx))
    return f"sent {amount} EUR to {to}"


# variant 2 says something else of the same tool: its fingerprint changes
app.add_tool(
    transfer,
    description="Move money to an account." if VARIANT == "1" else "Move money, or anything.",
)


@app.tool()
async def deposit(amount: int, ctx: Context[Any, Any]) -> str:
    """Deposit; declared idempotent_write by the operator."""
    await _hang_first(_count("deposit", ctx))
    return f"deposited {amount}"


@app.tool()
def refuse(ctx: Context[Any, Any]) -> str:
    """Always fails (the answer has isError)."""
    _count("refuse", ctx)
    raise ValueError("insufficient funds")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def statement(ctx: Context[Any, Any]) -> list[TextContent | ImageContent]:
    """A huge text and a picture."""
    _count("statement", ctx)
    return [
        TextContent(type="text", text="x" * 200_000),
        ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
    ]


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def hologram(ctx: Context[Any, Any]) -> CallToolResult:
    """Answers a content type no revision of MCP has."""
    _count("hologram", ctx)
    block: Any = {"type": "hologram", "data": "aGk="}
    return CallToolResult.model_construct(content=[block], is_error=False)


if os.environ.get("BANK_HOSTILE"):
    # what a careless or hostile server lists: names no model API takes, a schema
    # that is not a JSON Schema object
    app.add_tool(balance, name="two__parts")
    app.add_tool(balance, name="has space")
    app.add_tool(balance, name="typeless")
    bad = {"type": "object", "properties": {"account": {"type": 12}}}
    app._tool_manager.get_tool("typeless").parameters = bad  # type: ignore[union-attr]


if __name__ == "__main__":
    if sys.argv[1] == "http":
        app.run("streamable-http", port=int(sys.argv[2]))
    else:
        app.run("stdio")
