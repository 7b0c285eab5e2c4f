"""The keeper of the segments a process runs: it renews their leases and writes the
events they hold, from one thread per process (or, in tests, step by step)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from persistence.store import LeaseLostError, RunStore
from workers.events import RunEventSink

log = logging.getLogger("airlock")

Monotonic = Callable[[], float]
Sleep = Callable[[float], None]


class Keeper:
    """Renews the leases of the segments it holds (every third of the lease), so a long
    segment is not reclaimed, and writes the events a segment has held for up to
    ``delay``, so a long model call does not hide what came before it.

    One thread per process while any segment runs (started by the process that needs
    it: a Celery pool child is forked without its parent's threads; gone when no
    segment is left), instead of one per segment, whose start and join would cost
    more than a short segment's writes. With ``sleep=None`` it starts no thread: its
    holder calls ``tick`` (tests step it, with their own ``clock``)."""

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
        self._held: dict[str, tuple[str, RunEventSink]] = {}
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._thread: tuple[int, threading.Thread] | None = None

    def sink(self, run_id: str, owner: str) -> RunEventSink:
        """The event sink of a segment, on the keeper's clock."""
        return RunEventSink(self._store, run_id, owner, clock=self.clock)

    @contextmanager
    def hold(self, run_id: str, owner: str, sink: RunEventSink) -> Iterator[None]:
        with self._lock:
            if self._renew_at is None:
                self._renew_at = self.clock() + self._renew_every
            if self._sleep is not None and (self._thread is None or self._thread[0] != os.getpid()):
                thread = threading.Thread(target=self._keep, name="airlock-keeper", daemon=True)
                self._thread = (os.getpid(), thread)
                thread.start()
            self._held[run_id] = (owner, sink)
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(run_id, None)
            with self._busy:
                pass  # a renewal in flight ends before the segment does

    def _keep(self) -> None:
        assert self._sleep is not None
        while True:
            self._sleep(self.interval)
            if not self.tick():
                return

    def tick(self) -> bool:
        """One pass: write the events that have waited, renew the leases that are due.
        False when no segment is held (the thread then ends)."""
        with self._busy:
            with self._lock:
                held = list(self._held.items())
                if not held:
                    self._thread = None
                    self._renew_at = None
                    return False
            for run_id, (_, sink) in held:
                self._flush(run_id, sink)
            if self._renew_at is not None and self.clock() >= self._renew_at:
                self._renew_at = self.clock() + self._renew_every
                for run_id, (owner, _) in held:
                    self._renew_one(run_id, owner)
        return True

    def _flush(self, run_id: str, sink: RunEventSink) -> None:
        try:
            sink.flush(waited=self.interval)
        except LeaseLostError:  # the segment finds out at its next write, and stops
            log.warning("lease lost", extra={"action": "lease.lost", "run_id": run_id})
        except Exception:  # they stay pending: the segment's next write takes them
            log.warning(
                "could not write a segment's events",
                extra={"action": "events.error", "run_id": run_id},
                exc_info=True,
            )

    def _renew_one(self, run_id: str, owner: str) -> None:
        try:
            if not self._store.transitions.renew_lease(run_id, owner, self._lease):
                with self._lock:  # a segment that has just ended gave its lease back
                    lost = run_id in self._held
                if lost:
                    log.warning("lease lost", extra={"action": "lease.lost", "run_id": run_id})
        except Exception:
            log.warning("lease renewal failed", extra={"action": "lease.error"}, exc_info=True)
