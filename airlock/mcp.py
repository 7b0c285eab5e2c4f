"""MCP tools for agents: ``Agent(tools=[*mcp_tools("bank")])`` (docs/mcp.md)."""

from __future__ import annotations

from airlock.workers.mcp.tools import McpTool, mcp_tools

__all__ = ["McpTool", "mcp_tools"]
