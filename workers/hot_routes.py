"""The requests every run makes, answered without FastAPI's routing.

Each W1 run is a create, an approval and a handful of polls of its view. Through
FastAPI each costs its routing (a regex per route), its dependency solving, a
``Request``, anyio's thread hop (a capacity limiter and cancel scopes) and the
exception and exit-stack middlewares: more CPU than the service's own work, on the
cores the workers and the database share (measured, see BENCHMARKS.md, issue 17).
``HotRoutes`` sits inside the ``BodyGate`` (so the caller is authenticated and the
body read within its limit, as for every request) and answers ``GET
/v1/runs/{id}`` itself: the same service call, the same view, the same problem
documents. Everything else, and any request it does not take as it comes, goes on
to FastAPI, which also documents these routes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from starlette.types import ASGIApp, Receive, Scope, Send

from workers.problems import PROBLEMS, SafeJSONResponse, problem_of, problem_response
from workers.service import Service
from workers.views import run_view

T = TypeVar("T")

RUNS = "/v1/runs/"


class HotRoutes:
    def __init__(self, app: ASGIApp, *, service: Service, threads: int = 40) -> None:
        self._app = app
        self._service = service
        # the database is called from threads, as FastAPI does for a sync route; a
        # plain executor's hop costs less than anyio's
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="airlock-api")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            path: str = scope["path"]
            if path.startswith(RUNS) and "/" not in path[len(RUNS) :] and len(path) > len(RUNS):
                await self._get_run(path[len(RUNS) :], scope, receive, send)
                return
        await self._app(scope, receive, send)

    async def _get_run(self, run_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        service = self._service
        try:
            view = await self._call(lambda: run_view(service, service.get_run(run_id)))
        except tuple(PROBLEMS) as exc:  # answered as FastAPI's handlers answer them
            p = problem_of(exc)
            await problem_response(p.status, p.title, p.detail, type=p.type)(scope, receive, send)
            return
        await SafeJSONResponse(view)(scope, receive, send)

    async def _call(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)
