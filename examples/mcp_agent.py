"""An agent whose tools are an MCP server's: AIRLOCK_AGENTS=examples.mcp_agent:BANKER
with AIRLOCK_MCP_SERVERS=examples/mcp_servers.toml (docs/mcp.md)."""

from __future__ import annotations

from airlock import Agent, ScriptedModel
from airlock.mcp import mcp_tools

BANKER = Agent(
    name="banker",
    instructions="You move money when asked.",
    tools=[*mcp_tools("bank")],
    model=ScriptedModel(
        [
            {"tool_calls": [{"name": "bank__balance", "arguments": {"account": "ann"}}]},
            {"tool_calls": [{"name": "bank__transfer", "arguments": {"to": "bob", "amount": 5}}]},
            {"content": "Sent bob 5 EUR."},
        ]
    ),
)
