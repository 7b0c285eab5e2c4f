"""The inbox's live streams, under its sign-in: the waiting queue (``/inbox/stream``)
and a run's events (``/inbox/runs/{id}/stream``), the same streams as the API's
(``airlock.workers.http.streams``) for a page's EventSource (``static/live.js``), which sends
the sign-in's cookie and no bearer token. A stream ends when its sign-in does (signed
out or expired), seen at the next heartbeat."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool

from airlock.workers.http.hub import Hubs
from airlock.workers.http.inbox.pages import Inbox
from airlock.workers.http.problems import ProblemError
from airlock.workers.http.streams import (
    EventStream,
    StreamSlots,
    cursor_of,
    queue_stream,
    run_stream,
)


def mount(app: FastAPI, inbox: Inbox, hubs: Hubs, slots: StreamSlots) -> None:
    async def signed_in(request: Request) -> Callable[[EventStream], EventStream]:
        """How a stream is served under the request's sign-in: held as one of its
        streams, ended when the sign-in ends (signed out, or expired). Raises
        ``ProblemError`` (401) unless the request comes with a sign-in (before anything
        of the stream is read)."""
        session = await run_in_threadpool(inbox.session, request)
        if session is None:
            raise ProblemError(401, "Unauthorized", "sign in to the inbox first")

        async def signed_out() -> bool:
            return await run_in_threadpool(inbox.session, request) is None

        return lambda stream: stream.held_by(slots, f"inbox:{session.id}").ending_when(signed_out)

    @app.get("/inbox/stream", include_in_schema=False)
    async def waiting(request: Request) -> EventStream:
        serve = await signed_in(request)
        return serve(await queue_stream(hubs))

    @app.get("/inbox/runs/{run_id}/stream", include_in_schema=False)
    async def run_events(run_id: str, request: Request) -> EventStream:
        serve = await signed_in(request)
        cursor = cursor_of(request.headers.get("last-event-id"), request.query_params.get("after"))
        return serve(await run_stream(hubs, run_id, cursor))
