"""The client side of the Tasks extension (``io.modelcontextprotocol/tasks``) for the
``mcp`` SDK's own ``Client``, which does not ship one: ``Client(transport,
extensions=[TasksExtension()])`` declares the extension on each request, and a
``tools/call`` the gateway answers with a task is followed with ``tasks/get`` (at the
interval the task suggests) until it is over; ``call_tool`` then returns its result as
any call's. ``get_task`` and ``cancel_task`` speak the methods directly."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict

from airlock.loop import AirlockError

EXTENSION = "io.modelcontextprotocol/tasks"
DEFAULT_POLL = 2.0
"""Seconds between two polls when the task suggests none."""


class TaskParams(types.RequestParams):
    task_id: str


class CreatedTask(types.Result):
    """``tools/call``'s answer when the server made a task of it."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    """``tasks/get``'s answer: ``result`` once ``completed`` (a ``CallToolResult``)."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class GetTask(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class CancelTask(types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


class TaskEndedError(AirlockError, RuntimeError):
    """The task ended without a result (``cancelled``, ``failed``)."""


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), DetailedTask)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    await session.send_request(CancelTask(params=TaskParams(task_id=task_id)), types.Result)


class TasksExtension(ClientExtension):
    """Follows a task until it is over. ``poll``: seconds between two polls (default:
    what the task suggests); ``on_poll``: told of each ``tasks/get`` answer."""

    identifier = EXTENSION

    def __init__(
        self,
        poll: float | None = None,
        on_poll: Callable[[DetailedTask], None] | None = None,
    ) -> None:
        self.poll = poll
        self.on_poll = on_poll

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    async def resolve(self, task: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        suggested = task.poll_interval_ms
        while True:
            found = await get_task(ctx.session, task.task_id)
            if self.on_poll is not None:
                self.on_poll(found)
            if found.status == "completed" and found.result is not None:
                return types.CallToolResult.model_validate(found.result)
            if found.status in ("completed", "failed", "cancelled"):
                why = found.status_message or (found.error or {}).get("message", "")
                raise TaskEndedError(f"task {found.task_id} {found.status}: {why}")
            suggested = found.poll_interval_ms or suggested
            wait = self.poll if self.poll is not None else (suggested or 0) / 1000
            await anyio.sleep(wait or DEFAULT_POLL)


__all__ = [
    "EXTENSION",
    "CreatedTask",
    "DetailedTask",
    "TaskEndedError",
    "TasksExtension",
    "cancel_task",
    "get_task",
]
