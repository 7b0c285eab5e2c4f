"""A small MCP server (the SDK's ``MCPServer``, over stdio) for examples/mcp_servers.toml."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("bank")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def balance(account: str) -> str:
    """The balance of an account."""
    return f"{account}: 100 EUR"


@app.tool()
def transfer(to: str, amount: int, ctx: Context[Any, Any]) -> str:
    """Move money to an account (once per idempotency key, in a real bank)."""
    key = (ctx.request_context.meta or {}).get("io.airlock/idempotency-key")
    return f"sent {amount} EUR to {to} (idempotency key {key})"


if __name__ == "__main__":
    app.run("stdio")
