"""The live streams' hub (``airlock.workers.http.hub``) over a fake service: one read of the
heads per tick for every watched run, one read of the events of the runs that moved,
each watch sent every event after its cursor exactly once and in order (also a watch
that comes while a tick reads), the end once a run is over, a purged run's watches
closed, the queue's mark on change, heartbeats, and no task while nothing is
watched."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from airlock.persistence.domain import RunEvent, RunStatus, StreamHead, WaitingMark
from airlock.workers.http.hub import BEAT, CLOSE, Hub, Watch
from airlock.workers.service import Service
from tests.sse import Frame, parse

A, B = "run-a", "run-b"
AT = datetime(2026, 1, 1, tzinfo=UTC)


class FakeService:
    """What the hub reads: each run's events and status, the queue's mark; and what it
    asked."""

    def __init__(self) -> None:
        self.events: dict[str, list[RunEvent]] = {}
        self.status: dict[str, RunStatus] = {}
        self.mark = WaitingMark(0, None, 0)
        self.heads_asked: list[set[str]] = []
        self.events_asked: list[dict[str, int]] = []
        self.gate: threading.Event | None = None
        """Set: ``events_of`` waits on it (a tick held in the middle)."""
        self.fail = False

    def add(self, run_id: str, n: int, status: RunStatus = RunStatus.RUNNING) -> None:
        have = self.events.setdefault(run_id, [])
        for _ in range(n):
            seq = len(have) + 1
            have.append(RunEvent(run_id, seq, f"k{seq}", {"n": seq}, AT))
        self.status[run_id] = status

    def stream_heads(self, run_ids: Collection[str]) -> dict[str, StreamHead]:
        if self.fail:
            raise ConnectionError("the database went away")
        self.heads_asked.append(set(run_ids))
        return {
            r: StreamHead(r, self.status[r], len(self.events[r]))
            for r in run_ids
            if r in self.events
        }

    def events_of(self, cursors: Mapping[str, int], *, limit: int = 1000) -> list[RunEvent]:
        self.events_asked.append(dict(cursors))
        if self.gate is not None:
            self.gate.wait(10)
        found = [e for r, c in sorted(cursors.items()) for e in self.events[r] if e.seq > c]
        return found[:limit]

    def waiting_mark(self) -> WaitingMark:
        return self.mark


def hub_of(service: FakeService, **options: Any) -> Hub:
    return Hub(cast(Service, service), tick=options.pop("tick", 0.01), **options)


async def take(watch: Watch, n: int) -> list[Frame]:
    """The next ``n`` frames of a watch (heartbeats skipped)."""
    got: list[Frame] = []
    while len(got) < n:
        data = await asyncio.wait_for(watch.frames.get(), 10)
        assert data != CLOSE, f"closed after {got}"
        if data != BEAT:
            got += parse(data.decode())
    return got


def seqs(frames: list[Frame]) -> list[int]:
    return [f.data["seq"] for f in frames if f.event == "message"]


async def until(what: Any, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not what():
            await asyncio.sleep(0.005)


def test_every_watch_gets_each_event_after_its_cursor_once_from_one_read_per_tick() -> None:
    service = FakeService()
    service.add(A, 3)
    service.add(B, 1)

    async def main() -> None:
        hub = hub_of(service)
        first, second, other = hub.watch_run(A, 0), hub.watch_run(A, 2), hub.watch_run(B, 0)
        assert seqs(await take(first, 3)) == [1, 2, 3]
        assert seqs(await take(second, 1)) == [3]
        assert seqs(await take(other, 1)) == [1]
        assert service.heads_asked[0] == {A, B}
        assert service.events_asked[0] == {A: 0, B: 0}  # the least cursor of each run
        service.add(A, 2)
        assert seqs(await take(first, 2)) == [4, 5] and seqs(await take(second, 2)) == [4, 5]
        ticks = hub.ticks
        await until(lambda: hub.ticks > ticks + 3)
        assert all(q.frames.empty() for q in (first, second, other))  # nothing twice
        asked = len(service.events_asked)
        await until(lambda: hub.ticks > ticks + 6)
        assert len(service.events_asked) == asked  # idle: the heads alone are read
        for watch in (first, second, other):
            hub.leave(watch)
        assert hub.watching == 0

    asyncio.run(main())


def test_a_watch_that_comes_while_a_tick_reads_gets_its_events_next_tick() -> None:
    service = FakeService()
    service.add(A, 4)

    async def main() -> None:
        hub = hub_of(service)
        early = hub.watch_run(A, 2)
        service.gate = threading.Event()
        await until(lambda: service.events_asked)  # the tick reads events after 2 ...
        late = hub.watch_run(A, 0)  # ... when a watch from 0 comes
        service.gate.set()
        assert seqs(await take(early, 2)) == [3, 4]
        assert seqs(await take(late, 4)) == [1, 2, 3, 4]
        ticks = hub.ticks
        await until(lambda: hub.ticks > ticks + 3)
        assert early.frames.empty() and late.frames.empty()

    asyncio.run(main())


def test_a_finished_run_ends_its_watches_and_a_purged_one_closes_them() -> None:
    service = FakeService()
    service.add(A, 2)
    service.add(B, 1)

    async def main() -> None:
        hub = hub_of(service)
        done, gone = hub.watch_run(A, 0), hub.watch_run(B, 1)
        assert seqs(await take(done, 2)) == [1, 2]
        service.add(A, 1, RunStatus.COMPLETED)
        last = await take(done, 2)
        assert seqs(last) == [3]
        assert last[-1] == Frame("end", None, {"status": "completed", "last_seq": 3})
        assert await asyncio.wait_for(done.frames.get(), 10) == CLOSE
        del service.events[B]  # purged
        assert await asyncio.wait_for(gone.frames.get(), 10) == CLOSE
        await until(lambda: hub.watching == 0 and hub._task is None)  # no task left

    asyncio.run(main())


def latest(watch: Watch) -> int | None:
    """The waiting count of the last frame queued for ``watch`` (not taken)."""
    queued = list(watch.frames._queue)  # type: ignore[attr-defined]
    return parse(queued[-1].decode())[-1].data["waiting"] if queued else None


def test_the_queue_mark_goes_to_new_watches_and_to_all_when_it_changes() -> None:
    service = FakeService()
    service.mark = WaitingMark(2, AT, 7)

    async def main() -> None:
        hub = hub_of(service)
        one = hub.watch_queue()
        assert (await take(one, 1))[0] == Frame(
            "queue", None, {"waiting": 2, "changed_at": AT.isoformat()}
        )
        two = hub.watch_queue()
        assert (await take(two, 1))[0].data["waiting"] == 2
        ticks = hub.ticks
        await until(lambda: hub.ticks > ticks + 3)
        assert one.frames.empty() and two.frames.empty()  # unchanged: nothing sent
        service.mark = WaitingMark(2, AT, 9)  # one left, another came
        assert (await take(one, 1))[0].data["waiting"] == 2
        assert (await take(two, 1))[0].data["waiting"] == 2
        service.mark = WaitingMark(3, AT, 12)  # ``one`` reads nothing from here
        await until(lambda: latest(one) == 3)
        service.mark = WaitingMark(4, AT, 15)
        await until(lambda: latest(one) == 4)
        assert one.frames.qsize() == 1  # a slow reader is sent only the latest mark

    asyncio.run(main())


def test_heartbeats_and_a_failing_tick_do_not_end_a_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="airlock")
    service = FakeService()
    service.add(A, 1)

    async def main() -> None:
        hub = hub_of(service, heartbeat=0.0)
        watch = hub.watch_run(A, 1)
        assert await asyncio.wait_for(watch.frames.get(), 10) == BEAT
        service.fail = True
        ticks = hub.ticks
        await until(lambda: hub.ticks > ticks + 2)
        service.fail = False
        service.add(A, 1)
        assert seqs(await take(watch, 1)) == [2]

    asyncio.run(main())
    actions = [getattr(r, "action", None) for r in caplog.records]
    assert actions.count("stream.tick_failed") == 1  # once for the whole outage
    assert actions.count("stream.recovered") == 1
