"""The keeper of the segments a process runs: it renews their leases, from an OS thread
of the process, and writes the events they hold, from a thread of the worker's pool (or,
in tests, step by step)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from airlock.persistence.store import LeaseLostError, RunStore
from airlock.workers.service import native
from airlock.workers.service.events import RunEventSink

log = logging.getLogger("airlock")

Monotonic = Callable[[], float]
Sleep = Callable[[float], None]


class Keeper:
    """Renews the leases of the segments it holds (every third of the lease), so a long
    segment is not reclaimed, and writes the events a segment has held for up to
    ``delay``, so a long model call does not hide what came before it.

    Two threads per process while any segment runs (started by the process that needs
    them: a Celery pool child is forked without its parent's threads; gone when no
    segment is left), instead of one per segment, whose start and join would cost more
    than a short segment's writes:

    - the renewer, an OS thread (``airlock.workers.service.native``) on a connection of its own,
      renewing every lease of the process in one statement: under a gevent worker it
      goes on while hundreds of segments wait on their models and while one holds the
      CPU, and it never waits for a connection of the segments' pools;
    - the writer of held events, a thread of the pool's kind (a greenlet under gevent),
      since it shares each segment's sink and connections.

    With ``sleep=None`` it starts no thread: its holder calls ``tick`` (tests step it,
    with their own ``clock``)."""

    def __init__(
        self,
        store: RunStore,
        lease: timedelta,
        delay: float,
        *,
        clock: Monotonic = time.monotonic,
        sleep: Sleep | None = time.sleep,
    ) -> None:
        self._store = store
        self._lease = lease
        self.clock = clock
        self._sleep = sleep
        # every half delay, the events that have waited that long: none waits longer
        # than ``delay``, and a quick segment's events wait for its end
        self.interval = min(delay, lease.total_seconds() / 3) / 2
        self._renew_every = lease.total_seconds() / 3
        self._renew_at: float | None = None
        self._renewed_at: float | None = None
        """When the last pass renewed the leases (None while no segment is held)."""
        self._held: dict[str, tuple[str, RunEventSink]] = {}
        self._lock = native.lock()  # held for dictionary operations only
        self._writer: int | None = None
        self._renewer: int | None = None
        """The process whose thread runs (a forked child starts its own)."""

    def sink(self, run_id: str, owner: str) -> RunEventSink:
        """The event sink of a segment, on the keeper's clock."""
        return RunEventSink(self._store, run_id, owner, clock=self.clock)

    @contextmanager
    def hold(self, run_id: str, owner: str, sink: RunEventSink) -> Iterator[None]:
        pid = os.getpid()
        with self._lock:
            if self._renew_at is None:
                self._renew_at = self.clock() + self._renew_every
            self._held[run_id] = (owner, sink)
            start_writer = self._sleep is not None and self._writer != pid
            start_renewer = self._sleep is not None and self._renewer != pid
            if start_writer:
                self._writer = pid
            if start_renewer:
                self._renewer = pid
        # started outside the lock: under gevent, starting a thread (a greenlet) waits
        # for it in the hub, and another segment waiting on the lock would stop the hub
        if start_writer:
            threading.Thread(target=self._write_loop, name="airlock-keeper", daemon=True).start()
        if start_renewer:
            native.start_thread(self._renew_loop)
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(run_id, None)

    def _write_loop(self) -> None:
        assert self._sleep is not None
        while True:
            self._sleep(self.interval)
            if not self.write_held():
                return

    def _renew_loop(self) -> None:
        while True:
            native.sleep(self._renew_every)
            if not self.renew():
                return

    def tick(self) -> bool:
        """One pass, as the threads would: write the events that have waited, renew the
        leases if due. False when no segment is held."""
        if not self.write_held():
            return False
        if self._renew_at is not None and self.clock() >= self._renew_at:
            self._renew_at = self.clock() + self._renew_every
            self.renew()
        return True

    def write_held(self) -> bool:
        """Write the events that have waited. False when no segment is held (the
        writer thread then ends)."""
        with self._lock:
            held = list(self._held.items())
            if not held:
                self._writer = None
                self._renew_at = None
                return False
        for run_id, (_, sink) in held:
            self._flush(run_id, sink)
        return True

    def renew(self) -> bool:
        """Renew every held lease, in one statement. False when no segment is held (the
        renewer thread then ends).

        A lease it did not renew is not reported here: most often its segment has just
        made its final transition and not yet left ``hold``; when another worker really
        took the run, the segment's next guarded write fails and the segment reports the
        loss (``Segments._lease_lost``), once. What the renewer does report is its own
        lateness: a pass more than half a lease after the last leaves a lease close to
        expiring, where a sweep would take the run."""
        with self._lock:
            owners = {run_id: owner for run_id, (owner, _) in self._held.items()}
            if not owners:
                self._renewer = None
                self._renewed_at = None
                return False
        now = self.clock()
        try:
            renewed = self._store.transitions.renew_leases(owners, self._lease, apart=True)
        except Exception:
            log.warning("lease renewal failed", extra={"action": "lease.error"}, exc_info=True)
            return True
        self._late(now)
        ending = len(owners) - len(renewed)
        if ending:
            log.debug("leases not renewed", extra={"action": "lease.skipped", "runs": ending})
        return True

    def _late(self, now: float) -> None:
        last, self._renewed_at = self._renewed_at, now
        if last is not None and now - last > self._lease.total_seconds() / 2:
            log.warning(
                "lease renewal late: %.1f s after the last, with a lease of %.0f s",
                now - last,
                self._lease.total_seconds(),
                extra={"action": "lease.late"},
            )

    def _flush(self, run_id: str, sink: RunEventSink) -> None:
        try:
            sink.flush(waited=self.interval)
        except LeaseLostError:  # the segment finds out at its next write, stops and says so
            log.debug("events not written: lease lost", extra={"action": "lease.lost"})
        except Exception:  # they stay pending: the segment's next write takes them
            log.warning(
                "could not write a segment's events",
                extra={"action": "events.error", "run_id": run_id},
                exc_info=True,
            )
