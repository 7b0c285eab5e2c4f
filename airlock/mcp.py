"""MCP tools for agents: ``Agent(tools=[*mcp_tools("bank")])``; and, for a client of
the gateway, the Tasks extension's client side: ``Client(transport,
extensions=[TasksExtension()])`` (docs/mcp.md)."""

from __future__ import annotations

from airlock.workers.mcp.tasks_client import (
    CreatedTask,
    DetailedTask,
    TaskEndedError,
    TasksExtension,
    cancel_task,
    get_task,
)
from airlock.workers.mcp.tools import McpTool, mcp_tools

__all__ = [
    "CreatedTask",
    "DetailedTask",
    "McpTool",
    "TaskEndedError",
    "TasksExtension",
    "cancel_task",
    "get_task",
    "mcp_tools",
]
