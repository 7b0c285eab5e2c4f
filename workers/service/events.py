"""The loop's event sink for a run: the audit stream, written behind the run.

Events are kept in memory only while the run changes nothing outside it, and for
a short while (``Limits.events_delay``): they are written, in one statement, before
its next call of a tool that acts, by the worker's keeper thread once they have
waited that long (a slow model call does not hide them), and otherwise with the
run's transition at the end of the segment (the same statement that finishes or
suspends it). A read-only tool changes nothing: its ledger record, with its
result, waits with the events and is written by the same statement. So the stream
never lacks the record of a call that had effects before the next one starts, the
row's counters are current within that delay, a segment that ends quickly writes
once, and a segment whose lease was taken over writes nothing more. Were the
worker lost, what was still held is redone from the last checkpoint, and told
again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from pydantic import JsonValue

from airlock.loop import LoopEvent, Usage, event_payload
from airlock.loop.events import DecisionApplied, ModelCalled, RunStarted
from airlock.persistence.domain import CallRecord, LedgerEntry
from airlock.persistence.store import Event, Prior, RunStore


class Pending(NamedTuple):
    """What a segment has yet to write: its events, and the read-only calls they tell of."""

    events: list[Event]
    calls: list[CallRecord]


class RunEventSink:
    """The loop emits into it from the segment's thread; the keeper thread may flush it."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        owner: str,
        usage: Usage | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._run_id = run_id
        self._owner = owner
        self.usage = usage or Usage()
        """The run's token totals so far: seeded from the checkpoint, raised per model call."""
        self._pending: list[Event] = []
        self._calls: list[CallRecord] = []
        self._counters: tuple[int, Usage] | None = None
        self._clock = clock
        self._since = 0.0
        """When the oldest pending event was emitted (on ``clock``)."""
        self._lock = threading.Lock()

    def emit(self, event: LoopEvent) -> None:
        match event:
            case RunStarted():
                return  # the request event was written when the run was created
            case DecisionApplied(source="operator"):
                return  # written, with who decided, when the decision was recorded
        payload = event_payload(event)
        kind = str(payload.pop("kind"))
        payload.pop("run_id", None)
        with self._lock:
            if isinstance(event, ModelCalled):
                self.usage = self.usage + event.usage
                self._counters = (event.iteration, self.usage)  # raised on the row with it
            if not self._pending:
                self._since = self._clock()
            self._pending.append((kind, payload))

    def note(self, kind: str, payload: dict[str, JsonValue]) -> None:
        """An event of the run that the loop does not emit (an MCP tool's drift)."""
        with self._lock:
            if not self._pending:
                self._since = self._clock()
            self._pending.append((kind, payload))

    def record(self, call: CallRecord) -> None:
        """A read-only call ran: its ledger record is written with the events."""
        with self._lock:
            self._calls.append(call)

    def flush(self, waited: float = 0.0) -> None:
        """Write what is pending: the run is about to act on the outside world, or
        (``waited``) its oldest event has waited that many seconds. What could not be
        written stays pending; if the run's lease was taken over, ``LeaseLostError``."""
        with self._lock:
            if self._pending and self._clock() - self._since >= waited:
                self._store.events.append_events(
                    self._run_id,
                    self._pending,
                    counters=self._counters,
                    calls=self._calls,
                    owner=self._owner,
                )
                self._pending, self._calls, self._counters = [], [], None

    def start_call(
        self, call_id: str, tool: str, effect: str, arguments: dict[str, JsonValue]
    ) -> tuple[LedgerEntry, bool]:
        """Start a call that acts (``Ledger.start_call``), what is pending written with its
        ``started`` record, in one statement: the run is about to act on the outside
        world. What could not be written stays pending."""
        with self._lock:
            prior = Prior(self._pending, self._calls, self._counters)
            started = self._store.ledger.start_call(
                self._run_id, call_id, tool, effect, arguments, owner=self._owner, prior=prior
            )
            self._pending, self._calls, self._counters = [], [], None
            return started

    def take(self) -> Pending:
        """Hand what is pending to the run's transition, which writes it."""
        with self._lock:
            pending = Pending(self._pending, self._calls)
            self._pending, self._calls, self._counters = [], [], None
            return pending
