"""The tests' client side of the Tasks extension: ``airlock.mcp.TasksExtension`` (the
SDK's ``Client`` does not ship one), noting each poll; ``raw`` speaks the 2026-07-28
wire by hand, for what no client would send."""

from __future__ import annotations

import json
from typing import Any

import httpx
import mcp_types as types
from mcp.client.extension import ClaimContext

from airlock.mcp import CreatedTask, DetailedTask, TasksExtension, cancel_task, get_task
from airlock.workers.mcp.tasks_client import EXTENSION

VERSION = "2026-07-28"
__all__ = ["EXTENSION", "CreatedTask", "DetailedTask", "Tasks", "cancel_task", "get_task", "raw"]


class Tasks(TasksExtension):
    """Airlock's client side of the extension, polling every 0.2 s, noting what it was
    given and each poll."""

    def __init__(self, poll: float = 0.2) -> None:
        self.created: list[CreatedTask] = []
        self.polls: list[DetailedTask] = []
        super().__init__(poll, self.polls.append)

    async def resolve(self, task: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(task)
        return await super().resolve(task, ctx)


def raw(
    base: str,
    method: str,
    params: dict[str, Any],
    *,
    token: str,
    tasks: bool = True,
    name: str | None = None,
    literal: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One JSON-RPC request to ``/mcp`` on the 2026-07-28 wire, with bytes a hostile
    client may choose (each key of ``literal``, a JSON string in the encoded request, is
    replaced by its value: ``{'"nan"': "NaN"}``); its JSON answer."""
    capabilities: dict[str, Any] = {"extensions": {EXTENSION: {}}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params | {"_meta": meta}}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    content = json.dumps(request)
    for placeholder, value in (literal or {}).items():
        content = content.replace(placeholder, value)
    answer = httpx.post(f"{base}/mcp", content=content, headers=headers, timeout=60)
    found: dict[str, Any] = answer.json()
    return found
