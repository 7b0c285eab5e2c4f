"""Agents whose tools are the test MCP server's (``tests.integration.mcp_server``),
imported with ``mcp_tools`` from the servers file ``AIRLOCK_MCP_SERVERS`` names."""

from __future__ import annotations

from pydantic import JsonValue

from airlock.loop import Agent, ScriptedModel
from airlock.mcp import mcp_tools

BANK = mcp_tools("bank")


def _calls(name: str, arguments: dict[str, JsonValue]) -> Agent:
    steps: list[dict[str, JsonValue]] = [
        {"tool_calls": [{"name": f"bank__{name}", "arguments": arguments}]},
        {"content": "done"},
    ]
    return Agent(name=f"mcp_{name}", model=ScriptedModel(steps), tools=BANK)


AGENTS = [
    _calls("balance", {"account": "acc-1"}),
    _calls("transfer", {"to": "bob", "amount": 5}),
    _calls("audit", {"account": "acc-1"}),
    _calls("deposit", {"amount": 7}),
    _calls("refuse", {}),
    _calls("statement", {}),
    _calls("hologram", {}),
]
