"""The notification dispatcher: each worker process's own deliverer of the outbox, apart
from the segments (DESIGN §4, Outbound notifications).

A segment only records its notification in the outbox, in its transition's statement,
and wakes this process's dispatcher (a set event: no task, no broker message). The
dispatcher claims due rows in batches (``OutboxStore.claim``: ``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, so the dispatchers of several workers take disjoint rows; one
claimer at a time on SQLite; only a run's first unsettled row, so a run's events reach
the receiver in order) and sends each in a thread of its own (a greenlet under gevent),
at most ``AIRLOCK_NOTIFY_CONCURRENCY`` in flight, over the process's one pooled client
with a deadline per attempt and a bounded read (``airlock.workers.tasks.notify``). It never
takes a slot of the worker's pool: a slow, dead or trickling receiver holds
deliveries, never a segment.

Retries: a row that was not delivered is due again after a jittered backoff of its own
(``Retries``); and after a retryable failure its endpoint is not tried again until a
jittered backoff of the endpoint's passes (doubled per failure in a row, reset by a
2xx), so a receiver that is down is not sent every row that falls due, and rows for
other endpoints go on meanwhile. Without a wake-up (a transition in another process,
a retry falling due) the dispatcher looks every ``POLL`` seconds; woken, it claims at
most every ``GATHER`` seconds, what has fallen due meanwhile in one claim.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic import JsonValue

from airlock.persistence.domain import Run
from airlock.persistence.store.outbox import Notification
from airlock.workers.service import DeliveryError, Retries, Service
from airlock.workers.service.backoff import backoff
from airlock.workers.service.outbound import TAKE_FOR

log = logging.getLogger("airlock")

POLL = 0.25
"""Seconds between looks at the outbox when nothing wakes the dispatcher."""
GATHER = 0.05
"""Seconds between two claims at least: the notifications of transitions that come
together are claimed together (a claim is a statement; one per transition, under load,
cost the database more than the deliveries)."""
ENDPOINT_MAX_PAUSE = 30.0
"""Seconds an endpoint that keeps failing is left alone at most between attempts."""

Send = Callable[[str, str], int]
Observe = Callable[[float], None]


class Endpoint:
    """One receiver as this process has found it: after a retryable failure, no attempt
    until a jittered backoff passes, doubled per failure in a row; a 2xx resets it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._until = 0.0

    def ready_in(self) -> float:
        """Seconds until it may be tried again (0: now)."""
        with self._lock:
            return max(0.0, self._until - self._clock())

    def record(self, *, delivered: bool) -> None:
        with self._lock:
            if delivered:
                self._failures, self._until = 0, 0.0
                return
            pause = backoff(self._failures, base=0.5, cap=ENDPOINT_MAX_PAUSE)
            self._failures += 1
            self._until = max(self._until, self._clock() + pause)


class Dispatcher:
    """Delivers the outbox from threads of its own (see the module's docstring)."""

    def __init__(
        self,
        service: Service,
        send: Send,
        render: Callable[[Run], JsonValue],
        *,
        concurrency: int,
        retries: Retries,
        lease: timedelta = TAKE_FOR,
        observe: Observe | None = None,
        poll: float = POLL,
    ) -> None:
        self._service = service
        self._render = render
        self._concurrency = concurrency
        self._retries = retries
        self._lease = lease
        self._observe = observe
        self._poll = poll
        self.endpoint = Endpoint()
        self._send = self._recording(send)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="airlock-dispatcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Claim nothing more; wait up to ``timeout`` seconds for the deliveries in
        flight (a delivery cut short is due again when its claim's lease ends)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        ends = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < ends:
            time.sleep(0.01)

    def wake(self) -> None:
        """Look at the outbox now (a transition recorded a notification)."""
        self._wake.set()

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            wait = self._round()
            if wait > 0:
                self._wake.wait(wait)
            self._stopping.wait(GATHER)

    def _round(self) -> float:
        """Claim and start what may be sent now; the seconds to wait for the next round
        (unless woken)."""
        if (pause := self.endpoint.ready_in()) > 0:
            return pause
        free = self._concurrency - self.in_flight
        if free <= 0:
            return self._poll  # a delivery that ends wakes the dispatcher
        try:
            batch = self._service.claim_notifications(free, self._lease)
        except Exception as exc:  # the database is away: the rows wait there
            log.warning(
                f"could not claim notifications ({type(exc).__name__}); trying again",
                extra={"action": "notify.claim_failed"},
            )
            return 1.0
        for taken in batch:
            with self._lock:
                self._in_flight += 1
            threading.Thread(target=self._deliver, args=(taken,), daemon=True).start()
        return 0.0 if len(batch) == free else self._poll

    def _deliver(self, taken: Notification) -> None:
        try:
            if self._service.deliver_notification(taken, self._send, self._render, self._retries):
                self._observed(taken)
        except Exception:  # settling failed: the row is due again when its claim ends
            log.exception(
                "a delivery could not be recorded; it is due again when its claim ends",
                extra={"action": "notify.settle_failed", "run_id": taken.run_id},
            )
        finally:
            with self._lock:
                self._in_flight -= 1
            self._wake.set()  # a slot is free, and the run's next event may be due

    def _observed(self, taken: Notification) -> None:
        if self._observe is not None:
            lag = (datetime.now(UTC) - taken.created_at).total_seconds()
            self._observe(max(0.0, lag))

    def _recording(self, send: Send) -> Send:
        """``send``, telling the endpoint how each attempt went."""

        def recorded(body: str, webhook_id: str) -> int:
            try:
                status = send(body, webhook_id)
            except DeliveryError as exc:
                if not exc.final:
                    self.endpoint.record(delivered=False)
                raise
            self.endpoint.record(delivered=True)
            return status

        return recorded


_running: list[Dispatcher] = []
"""This process's dispatcher, while it runs one (``airlock.workers.tasks.steps``)."""


def attach(running: Dispatcher) -> None:
    """``running`` is this process's dispatcher: transitions wake it."""
    _running.append(running)


def detach(running: Dispatcher) -> None:
    _running.remove(running)


def wake_up(event_type: str, run_id: str) -> None:
    """A transition recorded a notification: this process's dispatcher (if it runs one)
    looks at the outbox now; else another process's finds it at its next look."""
    del event_type, run_id
    for running in _running:
        running.wake()
