"""The requests every run makes, answered without FastAPI's routing.

Each W1 run is a create, an approval and a handful of polls of its view. Through
FastAPI each costs its routing (a regex per route), its dependency solving, a
``Request``, anyio's thread hop (a capacity limiter and cancel scopes) and the
exception and exit-stack middlewares: more CPU than the service's own work, on the
cores the workers and the database share (measured, see BENCHMARKS.md, issue 17).
``HotRoutes`` sits inside the ``BodyGate`` (so the caller is authenticated and the
body read within its limit, as for every request) and answers ``GET
/v1/runs/{id}``, ``POST /v1/runs`` and ``POST /v1/runs/{id}/approval`` with the same
handlers (``workers.http.handlers``), views and problem documents as FastAPI's routes.

A create whose body is not a JSON object that ``CreateRun`` takes as it is (another
content type, a JSON error, a validation error) goes on to FastAPI with its body, so
every refusal of a create is FastAPI's own. Everything else, and any request it does
not take as it comes, goes on to FastAPI, which also documents these routes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from workers.http.guard import replay
from workers.http.handlers import CreateRun, Handlers, caller_of
from workers.http.problems import REFUSALS, SafeJSONResponse, refusal
from workers.service.views import run_view

T = TypeVar("T")

RUNS = "/v1/runs"
APPROVAL = "/approval"


class HotRoutes:
    def __init__(self, app: ASGIApp, *, handlers: Handlers, threads: int = 40) -> None:
        self._app = app
        self._handlers = handlers
        # the database is called from threads, as FastAPI does for a sync route; a
        # plain executor's hop costs less than anyio's
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="airlock-api")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            method: str = scope["method"]
            if method == "GET" and (run_id := _run_id(path, "")) is not None:
                await self._answer(self._get_run(run_id), scope, receive, send)
                return
            if method == "POST":
                if path == RUNS:
                    await self._create_run(scope, receive, send)
                    return
                if (run_id := _run_id(path, APPROVAL)) is not None:
                    await self._answer(self._approve(run_id, scope, receive), scope, receive, send)
                    return
        await self._app(scope, receive, send)

    async def _answer(
        self, work: Awaitable[JSONResponse], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """``work``'s response, or its refusal answered as FastAPI's handlers answer it."""
        try:
            response = await work
        except REFUSALS as exc:
            response = refusal(exc)
        await response(scope, receive, send)

    async def _get_run(self, run_id: str) -> SafeJSONResponse:
        service = self._handlers.service
        view = await self._call(lambda: run_view(service, service.get_run(run_id)))
        return SafeJSONResponse(view)

    async def _approve(self, run_id: str, scope: Scope, receive: Receive) -> SafeJSONResponse:
        raw = await _body(receive)
        return await self._handlers.approve(
            run_id, raw, Headers(scope=scope), caller_of(scope), in_thread=self._call
        )

    async def _create_run(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await _body(receive)
        body = _create_body(Headers(scope=scope).get("content-type"), raw)
        if body is None:  # FastAPI refuses it, in its own words
            await self._app(scope, replay(raw, receive), send)
            return
        caller = caller_of(scope)
        handlers = self._handlers
        await self._answer(
            self._call(lambda: handlers.create_run(body, caller)), scope, receive, send
        )

    async def _call(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)


def _run_id(path: str, suffix: str) -> str | None:
    """The ``{id}`` of ``/v1/runs/{id}`` + ``suffix``, as FastAPI's path would match it
    (a non-empty segment without ``/``)."""
    if not (path.startswith(RUNS + "/") and path.endswith(suffix)):
        return None
    run_id = path[len(RUNS) + 1 : len(path) - len(suffix)]
    return run_id if run_id and "/" not in run_id else None


def _create_body(content_type: str | None, raw: bytes) -> CreateRun | None:
    """The create's body as FastAPI's route would have it (``json.loads`` of a JSON
    content type, then ``CreateRun``), or None where FastAPI would refuse it or take it
    another way."""
    if content_type is None or content_type.split(";")[0].strip().lower() != "application/json":
        return None
    try:
        return CreateRun.model_validate(json.loads(raw))
    except Exception:  # any refusal is left to FastAPI, in its own words
        return None


async def _body(receive: Receive) -> bytes:
    """The whole body (the ``BodyGate`` has read it within its limit)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
