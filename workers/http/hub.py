"""The live streams' hub: one per event loop of an API process (under uvicorn, one per
process). Every open stream (``airlock.workers.http.streams``) is a ``Watch`` here, a queue
of frames on the event loop: no thread and no database connection of its own. While
any stream is open, one task reads the database once per tick for all of them (the
heads of every watched run in one statement; the new events of the runs that moved,
in one more; the waiting queue's mark, in one, while the queue is watched), each
statement on a worker thread with a connection borrowed for it, and fans the frames
out."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar
from weakref import WeakKeyDictionary

from anyio import CapacityLimiter, to_thread
from prometheus_client import CollectorRegistry, Gauge
from pydantic import JsonValue

from airlock.persistence.domain import RunEvent, StreamHead, WaitingMark
from airlock.workers.service import Service
from airlock.workers.service.views import event_view, iso

log = logging.getLogger("airlock")
TICK_FAILED = {"action": "stream.tick_failed"}
T = TypeVar("T")

TICK = 0.5
"""Seconds between two reads of the database while a stream is open."""
HEARTBEAT = 15.0
"""Seconds between two comments sent on every stream, so that proxies keep it open
(and a stream whose client went away is noticed)."""
BATCH = 1000
"""Events read at most per tick, for all runs (a run with more gets the rest next)."""
THREADS = 4
"""Threads the streams read the database in at once, per event loop: a burst of
reconnecting clients (an API restarted under a thousand EventSources) waits its turn
here, instead of taking every thread (and pooled connection) the other routes use."""
RETRY = b"retry: 3000\n\n"
"""What a stream starts with: an EventSource reconnects after 3 s."""
BEAT = b": keep-alive\n\n"
CLOSE = b""
"""Put on a watch's queue: its stream ends here (no more frames follow)."""


def frame(data: JsonValue, *, seq: int | None = None, event: str | None = None) -> bytes:
    """One server-sent event: ``id:`` (when given), ``event:`` (when not a plain
    message) and ``data:``, the JSON on one line, ASCII (every other character as its
    ``\\u`` escape: no client's line splitting, nor a lone surrogate, can break it)."""
    head = (f"id: {seq}\n" if seq is not None else "") + (f"event: {event}\n" if event else "")
    body = json.dumps(data, allow_nan=False, separators=(",", ":"))
    return f"{head}data: {body}\n\n".encode()


def event_frame(event: RunEvent) -> bytes:
    return frame(event_view(event), seq=event.seq)


def end_frame(head: StreamHead) -> bytes:
    """The last frame of a run's stream: the run reached ``head.status`` and every event
    was sent (no ``id``: the client's last event id stays the last event's)."""
    return frame({"status": head.status.value, "last_seq": head.last_seq}, event="end")


def mark_frame(mark: WaitingMark) -> bytes:
    return frame({"waiting": mark.count, "changed_at": iso(mark.changed_at)}, event="queue")


def finished(head: StreamHead, cursor: int) -> bool:
    """Whether a stream at ``cursor`` has sent every event of a run that is over."""
    return head.status.terminal and cursor >= head.last_seq


@dataclass(eq=False)
class Watch:
    """One open stream: of a run's events after ``cursor``, or of the waiting queue
    (``run_id`` None)."""

    run_id: str | None
    cursor: int = 0
    frames: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)
    fresh: bool = True
    """A queue watch that was not sent the queue's mark yet."""

    def send(self, data: bytes) -> None:
        self.frames.put_nowait(data)


class Hub:
    """The watches of one event loop, and the task that feeds them (running only while
    there is one)."""

    def __init__(
        self,
        service: Service,
        *,
        tick: float = TICK,
        heartbeat: float = HEARTBEAT,
        batch: int = BATCH,
    ) -> None:
        self.service = service
        self.tick = tick
        self.heartbeat = heartbeat
        self.batch = batch
        self._runs: dict[str, set[Watch]] = {}
        self._queue: set[Watch] = set()
        self._task: asyncio.Task[None] | None = None
        self._mark: WaitingMark | None = None
        self._beat = time.monotonic()
        self._limiter = CapacityLimiter(THREADS)
        self._open = 0
        self.ticks = 0
        """Ticks run so far (what a test waits on, instead of a sleep)."""

    @property
    def watching(self) -> int:
        """Streams open (a count kept as they come and go: read by ``/metrics`` from
        another thread)."""
        return self._open

    async def read(self, work: Callable[[], T]) -> T:
        """``work`` (a read of the database, borrowing a connection for it) on one of
        the streams' threads."""
        return await to_thread.run_sync(work, limiter=self._limiter)

    def watch_run(self, run_id: str, cursor: int) -> Watch:
        """A watch of ``run_id``'s events after ``cursor`` (sent in order, each once),
        ended by ``end_frame`` once the run is over, or closed if it is purged."""
        watch = Watch(run_id, cursor)
        self._runs.setdefault(run_id, set()).add(watch)
        self._open += 1
        self._start()
        return watch

    def watch_queue(self) -> Watch:
        """A watch of the waiting queue: its mark now, then whenever it changes."""
        watch = Watch(None)
        self._queue.add(watch)
        self._open += 1
        self._start()
        return watch

    def leave(self, watch: Watch) -> None:
        watches = self._queue if watch.run_id is None else self._runs.get(watch.run_id, set())
        if watch in watches:
            watches.discard(watch)
            self._open -= 1
            if watch.run_id is not None and not watches:
                del self._runs[watch.run_id]
        if self._task is not None and not (self._runs or self._queue):
            self._task.cancel()  # nothing to feed: no tick until the next stream
            self._task = None

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._feed())

    async def _feed(self) -> None:
        failing = False
        try:
            while self._runs or self._queue:
                try:
                    await self.step()
                except Exception:  # the database away: the next tick tries again
                    if not failing:  # once, not twice a second while it is away
                        log.exception("live streams wait: a read failed", extra=TICK_FAILED)
                    failing = True
                else:
                    if failing:
                        log.info("live streams go on", extra={"action": "stream.recovered"})
                    failing = False
                await asyncio.sleep(self.tick)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def step(self) -> None:
        """One tick: new events to the runs' watches, the queue's mark, heartbeats."""
        self.ticks += 1
        if self._runs:
            await self._runs_step()
        if self._queue:
            await self._queue_step()
        now = time.monotonic()
        if now - self._beat >= self.heartbeat:
            self._beat = now
            for watch in self._all():
                if watch.frames.empty():  # one that has frames waiting is not idle
                    watch.send(BEAT)

    def _all(self) -> Iterable[Watch]:
        yield from self._queue
        for watches in self._runs.values():
            yield from watches

    async def _runs_step(self) -> None:
        cursors = {rid: min(w.cursor for w in ws) for rid, ws in self._runs.items()}
        heads = await self.read(lambda: self.service.stream_heads(list(cursors)))
        moved = {r: c for r, c in cursors.items() if r in heads and heads[r].last_seq > c}
        events: list[RunEvent] = []
        if moved:
            service, batch = self.service, self.batch
            events = await self.read(lambda: service.events_of(moved, limit=batch))
        by_run: dict[str, list[RunEvent]] = {}
        for event in events:
            by_run.setdefault(event.run_id, []).append(event)
        for run_id, since in cursors.items():
            self._deliver(run_id, since, heads.get(run_id), by_run.get(run_id, []))

    def _deliver(
        self, run_id: str, since: int, head: StreamHead | None, events: list[RunEvent]
    ) -> None:
        """A run's new events (those after ``since``) to each of its watches, each only
        the ones it has not had, then the end to those that have all of a run that is
        over; a purged run's watches are closed. A watch that came while the events
        were read, with a cursor before ``since``, gets its own next tick."""
        watches = self._runs.get(run_id, set())
        frames = [(e.seq, event_frame(e)) for e in events]
        for watch in list(watches):
            if head is None:
                watch.send(CLOSE)
                self.leave(watch)
                continue
            if watch.cursor < since:
                continue
            for seq, data in frames:
                if seq > watch.cursor:
                    watch.send(data)
                    watch.cursor = seq
            if finished(head, watch.cursor):
                watch.send(end_frame(head))
                watch.send(CLOSE)
                self.leave(watch)

    async def _queue_step(self) -> None:
        mark = await self.read(self.service.waiting_mark)
        changed, self._mark = mark != self._mark, mark
        data = mark_frame(mark)
        for watch in self._queue:
            if changed or watch.fresh:
                watch.fresh = False
                while not watch.frames.empty():  # a client slow to read: only the latest
                    watch.frames.get_nowait()
                watch.send(data)


class Hubs:
    """The hub of each event loop the app serves on, made at its first stream (one
    under uvicorn; a test client may run one loop per request)."""

    def __init__(self, service: Service, *, tick: float = TICK, heartbeat: float = HEARTBEAT):
        self.service = service
        self.tick = tick
        self.heartbeat = heartbeat
        self._hubs: WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = WeakKeyDictionary()

    @property
    def watching(self) -> int:
        """Streams open on every loop."""
        return sum(hub.watching for hub in list(self._hubs.values()))

    def measured(self, registry: CollectorRegistry) -> None:
        """``airlock_streams_open`` in the API's metrics."""
        gauge = Gauge("airlock_streams_open", "Live event streams open", registry=registry)
        gauge.set_function(lambda: self.watching)

    def here(self) -> Hub:
        loop = asyncio.get_running_loop()
        hub = self._hubs.get(loop)
        if hub is None:
            hub = Hub(self.service, tick=self.tick, heartbeat=self.heartbeat)
            self._hubs[loop] = hub
        return hub
