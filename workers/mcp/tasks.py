"""The Tasks extension (``io.modelcontextprotocol/tasks``, protocol 2026-07-28) on the
gateway's side, which the ``mcp`` SDK does not ship: a client that declares it on a
``tools/call`` gets a held call as a task at once (``resultType: "task"``), then follows
it with ``tasks/get``; ``tasks/cancel`` withdraws it; ``tasks/update`` has nothing to
answer (a held call asks its client nothing).

A task is a held call (``mcp_gateway_calls``): its id is the call's (a random UUID),
bound to the principal that made it (another's is not found), and everything a
``tasks/get`` answers is read from the database, so any gateway instance answers any
task. The methods are served through the SDK's documented extension points: the
low-level ``Server``'s ``add_request_handler`` and its ``extensions`` ad."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

from airlock.persistence.domain import Run, RunStatus
from airlock.persistence.store import HeldCall
from airlock.workers.mcp.gateway import (
    RUN_META,
    STATUS_META,
    Answer,
    Gateway,
    InThread,
    TaskNotFoundError,
    WithdrawLaterError,
)
from airlock.workers.mcp.tasks_client import EXTENSION
from airlock.workers.service.principals import Principal

WITHDRAW_TRIES = 5
WITHDRAW_PAUSE = 0.1
"""A cancel of a task whose run is asking waits 0.4 s at most (in a thread of the API's
pool: a flood of such cancels holds a few threads a moment, not seconds)."""
POLL_MS = 2000
"""The polling interval a task suggests (a person decides in seconds or hours)."""


class TaskParams(RequestParams):
    """``tasks/get`` and ``tasks/cancel``'s params: the task's id."""

    model_config = ConfigDict(extra="allow")
    task_id: str = Field(alias="taskId", min_length=1, max_length=100)


class UpdateParams(TaskParams):
    """``tasks/update``'s: its ``inputResponses`` are taken and ignored (a held call asks
    its client nothing, so none is outstanding)."""

    input_responses: dict[str, Any] = Field(alias="inputResponses")


def wants_task(ctx: Any) -> bool:
    """Whether this request's client declared the extension (only a 2026-07-28 request
    can: the handshake-era wire has no place for a task result)."""
    if getattr(ctx, "protocol_version", None) not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and EXTENSION in capabilities.extensions)


def created(held: HeldCall, run: Run, gateway: Gateway) -> dict[str, Any]:
    """``tools/call``'s ``CreateTaskResult`` for a held call."""
    return {"resultType": "task"} | shape(held, run, None, gateway)


def shape(held: HeldCall, run: Run, done: Answer | None, gateway: Gateway) -> dict[str, Any]:
    """The task as ``tasks/get`` answers it: ``working`` while its run is not over
    (``statusMessage`` says where to decide it); then ``completed`` with the tool result
    (the upstream's, or ``isError`` with the reason of a deny, an expiry or a failure);
    ``cancelled`` when its run was cancelled before its call was sent."""
    found: dict[str, Any] = {
        "taskId": held.id,
        "createdAt": _iso(held.opened_at or run.created_at),
        "lastUpdatedAt": _iso(run.updated_at),
        "ttlMs": None,
        "pollIntervalMs": POLL_MS,
        "_meta": {RUN_META: run.id, STATUS_META: run.status.value},
    }
    if done is None:
        return found | {"status": "working", "statusMessage": _doing(run, gateway)}
    if run.status is RunStatus.CANCELLED and not done.sent:
        return found | {"status": "cancelled", "statusMessage": done.text}
    result = {"content": [{"type": "text", "text": done.text}], "isError": done.is_error}
    return found | {"status": "completed", "result": result | {"_meta": done.meta}}


def _doing(run: Run, gateway: Gateway) -> str:
    if run.status.terminal:  # ended while its call was being made: its outcome is awaited
        return f"run {run.id} is {run.status} while its call is being made: awaiting its outcome"
    if run.status is RunStatus.WAITING_FOR_APPROVAL:
        return gateway.waiting(run.id)
    if run.turn_digest is None:  # its first segment: it is about to ask
        return f"asking for approval: run {run.id}"
    return f"approved: run {run.id} is making the call"


def serve_tasks(
    server: Server[Any],
    gateway: Gateway,
    *,
    caller: Callable[[Any], Principal],
    in_thread: InThread,
) -> None:
    """Serve the extension's methods on ``server`` and advertise it."""

    async def get(ctx: Any, params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, EXTENSION)
        principal = caller(ctx)
        held, run, done = await _found(in_thread, lambda: gateway.task(principal, params.task_id))
        return {"resultType": "complete"} | shape(held, run, done, gateway)

    async def cancel(ctx: Any, params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, EXTENSION)
        principal = caller(ctx)
        await _found(in_thread, lambda: withdrawn(gateway, principal, params.task_id))
        return {"resultType": "complete"}

    async def update(ctx: Any, params: UpdateParams) -> dict[str, Any]:
        require_client_extension(ctx, EXTENSION)
        principal = caller(ctx)
        await _found(in_thread, lambda: gateway.owned(principal, params.task_id))
        return {"resultType": "complete"}

    server.add_request_handler("tasks/get", TaskParams, get)
    server.add_request_handler("tasks/cancel", TaskParams, cancel)
    server.add_request_handler("tasks/update", UpdateParams, update)
    server.extensions[EXTENSION] = {}


def withdrawn(gateway: Gateway, principal: Principal, task_id: str) -> bool:
    """``Gateway.withdraw``, again while the run is asking for approval (its first
    segment takes a moment), ``WITHDRAW_TRIES`` times at most, ``WITHDRAW_PAUSE``
    seconds apart; then ``WithdrawLaterError``."""
    for _ in range(WITHDRAW_TRIES - 1):
        try:
            return gateway.withdraw(principal, task_id)
        except WithdrawLaterError:
            time.sleep(WITHDRAW_PAUSE)
    return gateway.withdraw(principal, task_id)


async def _found(in_thread: InThread, work: Callable[[], Any]) -> Any:
    try:
        return await in_thread(work)
    except TaskNotFoundError as exc:
        raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: {exc}") from exc
    except WithdrawLaterError as exc:  # the client is told its cancel did not take
        raise MCPError(INTERNAL_ERROR, str(exc)) from exc


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


__all__ = ["EXTENSION", "created", "serve_tasks", "shape", "wants_task"]
