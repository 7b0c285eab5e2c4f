"""A client side of the Tasks extension (``io.modelcontextprotocol/tasks``) for the SDK's
own ``Client``, which does not ship one: declared through the SDK's ``ClientExtension``,
its ``ResultClaim`` takes a ``tools/call`` answered with a task and polls ``tasks/get``
until the task is over; ``raw`` speaks the 2026-07-28 wire by hand, for what no client
would send."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import httpx
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict

EXTENSION = "io.modelcontextprotocol/tasks"
VERSION = "2026-07-28"


class TaskParams(types.RequestParams):
    task_id: str


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None


class DetailedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), DetailedTask)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    await session.send_request(CancelTask(params=TaskParams(task_id=task_id)), types.Result)


class Tasks(ClientExtension):
    """Follows a task until it is over, noting what it was given and each poll."""

    identifier = EXTENSION

    def __init__(self, poll: float = 0.2) -> None:
        self.poll = poll
        self.created: list[CreatedTask] = []
        self.polls: list[DetailedTask] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, task: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(task)
        while True:
            found = await get_task(ctx.session, task.task_id)
            self.polls.append(found)
            if found.status == "completed":
                return types.CallToolResult.model_validate(found.result)
            if found.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {found.status}: {found.status_message}")
            await anyio.sleep(self.poll)


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
