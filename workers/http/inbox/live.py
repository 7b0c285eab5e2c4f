"""The inbox's live streams, under its sign-in: the waiting queue (``/inbox/stream``)
and a run's events (``/inbox/runs/{id}/stream``), the same streams as the API's
(``workers.http.streams``) for a page's EventSource (``static/live.js``), which sends
the sign-in's cookie and no bearer token. A stream ends when its sign-in does (signed
out or expired), seen at the next heartbeat."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from workers.http.hub import Hubs
from workers.http.inbox.pages import Inbox
from workers.http.problems import ProblemError
from workers.http.streams import EventStream, cursor_of, queue_stream, run_stream


def mount(app: FastAPI, inbox: Inbox, hubs: Hubs) -> None:
    async def signed_in(request: Request) -> Callable[[], Awaitable[bool]]:
        """Raises ``ProblemError`` (401) unless the request comes with a sign-in; else
        whether it has ended since (signed out, or expired): its streams end then."""
        if await run_in_threadpool(inbox.session, request) is None:
            raise ProblemError(401, "Unauthorized", "sign in to the inbox first")

        async def signed_out() -> bool:
            return await run_in_threadpool(inbox.session, request) is None

        return signed_out

    @app.get("/inbox/stream", include_in_schema=False)
    async def waiting(request: Request) -> EventStream:
        signed_out = await signed_in(request)
        return (await queue_stream(hubs)).ending_when(signed_out)

    @app.get("/inbox/runs/{run_id}/stream", include_in_schema=False)
    async def run_events(run_id: str, request: Request) -> EventStream:
        signed_out = await signed_in(request)
        cursor = cursor_of(request.headers.get("last-event-id"), request.query_params.get("after"))
        return (await run_stream(hubs, run_id, cursor)).ending_when(signed_out)
