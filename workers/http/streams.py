"""Live streams as server-sent events (DESIGN §5): a run's events
(``GET /v1/runs/{id}/events/stream``) and the waiting queue
(``GET /v1/approvals/stream``); the inbox serves the same under its sign-in
(``airlock.workers.http.inbox.live``). A stream replays what the database holds after the
client's cursor, then follows the hub (``airlock.workers.http.hub``): an idle stream holds no
thread and no database connection."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from airlock.persistence.domain import StreamHead
from airlock.persistence.store import UnknownRunError, parse_run_id
from airlock.workers.http.hub import BEAT, CLOSE, RETRY, Hub, Hubs, end_frame, event_frame, finished
from airlock.workers.http.problems import ProblemError
from airlock.workers.service.principals import Principal

MAX_SEQ = 2**31 - 1
"""The largest event number (an INTEGER column); a larger cursor is 422, not a
database error."""
REPLAY_LIMIT = 1000
"""Events read from the database at once while a stream replays them (``events``'
default page)."""
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
"""No cache, and no proxy buffering (nginx's header): each event goes out as it comes."""
CURSOR_DOC = (
    "Resume after this event number (a reconnecting EventSource sends it; it wins over `after`)"
)


def cursor_of(last_event_id: str | None, after: str | None) -> int:
    """The event number a stream resumes after: ``Last-Event-ID`` (what an EventSource
    sends when it reconnects), else ``?after=``, else 0 (a blank one is not given).
    Raises ``ProblemError`` (422)."""
    source, raw = "Last-Event-ID", last_event_id
    if raw is None or not raw.strip():
        source, raw = "after", after
    if raw is None or not raw.strip():  # blank: as if not given
        return 0
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10) or int(raw) > MAX_SEQ:
        told = f"{source} must be an event number (0 to {MAX_SEQ}), not {raw[:40]!r}"
        raise ProblemError(422, "Bad cursor", told)
    return int(raw)


class EventStream(StreamingResponse):
    """``text/event-stream`` over an async generator of frames, closed (so that its
    watch leaves the hub) however the response ends."""

    media_type = "text/event-stream"

    def __init__(
        self, frames: AsyncGenerator[bytes, None], on_close: Callable[[], None] | None = None
    ) -> None:
        super().__init__(frames, headers=HEADERS)
        self._frames = frames
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self._frames.aclose()
            finally:
                if self._on_close is not None:
                    self._on_close()

    def ending_when(self, gone: Callable[[], Awaitable[bool]]) -> EventStream:
        """This stream, ended (its client reconnects, and is refused) once ``gone()``:
        asked at each heartbeat of an idle stream, and at most every ``RECHECK``
        seconds while frames flow."""
        return EventStream(_until(self._frames, gone), self._on_close)

    def held_by(self, slots: StreamSlots, caller: str) -> EventStream:
        """This stream, counted as one of ``caller``'s open streams until it ends.
        Raises ``ProblemError`` (429) when the caller holds ``slots.limit`` already."""
        slots.take(caller)
        return EventStream(self._frames, lambda: slots.give_back(caller))


MAX_STREAMS_PER_CALLER = 256
"""Streams one caller (a token's subject, the API token's holder, an inbox sign-in) may
hold open at once: each holds a watch in the hub, and a connection."""


class StreamSlots:
    """How many streams each caller holds open."""

    def __init__(self, limit: int = MAX_STREAMS_PER_CALLER) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, caller: str) -> None:
        with self._lock:
            held = self._held.get(caller, 0)
            if held >= self.limit:
                raise ProblemError(
                    429,
                    "Too many streams",
                    f"this caller holds {held} open streams, the most allowed: close one first",
                )
            self._held[caller] = held + 1

    def give_back(self, caller: str) -> None:
        with self._lock:
            left = self._held.get(caller, 1) - 1
            if left > 0:
                self._held[caller] = left
            else:
                self._held.pop(caller, None)


RECHECK = 15.0
"""Seconds between two checks that a stream's reader may still read it (``ending_when``)."""


async def _until(
    frames: AsyncGenerator[bytes, None], gone: Callable[[], Awaitable[bool]]
) -> AsyncGenerator[bytes, None]:
    checked = time.monotonic()
    async with aclosing(frames):
        async for frame in frames:
            if frame == BEAT or time.monotonic() - checked >= RECHECK:
                if await gone():
                    return
                checked = time.monotonic()
            yield frame


async def run_stream(hubs: Hubs, run_id: str, cursor: int) -> EventStream:
    """The stream of ``run_id``'s events after ``cursor``. Raises ``UnknownRunError``
    (404), ``ProblemError`` (410: a cursor of a run no longer kept; 422: a cursor past
    the run's last event)."""
    parsed = parse_run_id(run_id)
    if parsed is None:
        raise UnknownRunError(f"no run has id {run_id!r}")
    run_id = str(parsed)
    hub = hubs.here()
    head = (await hub.read(partial(hubs.service.stream_heads, [run_id]))).get(run_id)
    if head is None and cursor > 0:
        raise ProblemError(
            410,
            "Gone",
            f"run {run_id} is no longer kept (purged after its retention window), so its "
            f"events after {cursor} cannot be replayed",
        )
    if head is None:
        raise UnknownRunError(f"no run has id {run_id!r}")
    if cursor > head.last_seq:
        raise ProblemError(
            422,
            "Bad cursor",
            f"run {run_id} has no event {cursor}: its last is {head.last_seq}",
        )
    return EventStream(_run_frames(hub, head, cursor))


async def _run_frames(hub: Hub, head: StreamHead, cursor: int) -> AsyncGenerator[bytes, None]:
    """What the database holds after ``cursor``, then the hub's: the end once a run
    that was over when the stream opened is replayed."""
    yield RETRY
    service, run_id = hub.service, head.run_id
    while True:
        try:
            events = await hub.read(partial(service.events, run_id, after=cursor))
        except UnknownRunError:
            return  # purged meanwhile: a reconnect is answered 410
        for event in events:
            yield event_frame(event)
            cursor = event.seq
        if len(events) < REPLAY_LIMIT:
            break
    if finished(head, cursor):
        yield end_frame(head)
        return
    async with aclosing(_watched(hub, run_id, cursor)) as frames:
        async for data in frames:
            yield data


async def _watched(hub: Hub, run_id: str | None, cursor: int = 0) -> AsyncGenerator[bytes, None]:
    """The frames the hub sends a watch of ``run_id`` (None: the queue) until it closes;
    the watch leaves the hub however the stream ends."""
    watch = hub.watch_queue() if run_id is None else hub.watch_run(run_id, cursor)
    try:
        while (data := await watch.frames.get()) != CLOSE:
            yield data
    finally:
        hub.leave(watch)


async def queue_stream(hubs: Hubs) -> EventStream:
    """The waiting queue's stream: its mark now, then at each change."""
    return EventStream(_queue_frames(hubs.here()))


async def _queue_frames(hub: Hub) -> AsyncGenerator[bytes, None]:
    yield RETRY
    async with aclosing(_watched(hub, None)) as frames:
        async for data in frames:
            yield data


SSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "server-sent events",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}


def caller_key(scope: Scope) -> str:
    """Who holds a stream of the API (``StreamSlots``): the gate's verified caller."""
    caller: Principal | None = scope.get("state", {}).get("principal")
    if caller is None:
        return "token"  # the API token's holder, or anyone on an open API
    return f"{caller.method}:{caller.client or caller.issuer}:{caller.id}"


def served(scope: Scope, stream: EventStream, slots: StreamSlots) -> EventStream:
    """``stream`` as the gate's verified caller holds it: one of its streams, ended at
    the first heartbeat after its token is no longer accepted (a stream is read with a
    run read's authority, and no longer than it; a reconnect is then refused, 401)."""
    held = stream.held_by(slots, caller_key(scope))
    until: float | None = scope.get("state", {}).get("until")
    if until is None:
        return held

    async def expired() -> bool:
        return time.time() >= until

    return held.ending_when(expired)


def mount(app: FastAPI, hubs: Hubs, slots: StreamSlots) -> None:
    """The API's streams, authenticated by the gate as every ``/v1/runs`` route is."""

    @app.get(
        "/v1/runs/{run_id}/events/stream",
        responses=SSE,
        response_class=EventStream,
        status_code=200,
    )
    async def run_events_stream(
        run_id: str,
        request: Request,
        after: Annotated[str | None, Query(description="Resume after this event number")] = None,
        last_event_id: Annotated[str | None, Header(description=CURSOR_DOC)] = None,
    ) -> EventStream:
        stream = await run_stream(hubs, run_id, cursor_of(last_event_id, after))
        return served(request.scope, stream, slots)

    @app.get("/v1/approvals/stream", responses=SSE, response_class=EventStream, status_code=200)
    async def approvals_stream(request: Request) -> EventStream:
        return served(request.scope, await queue_stream(hubs), slots)
