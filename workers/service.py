"""The use cases. Celery tasks, HTTP handlers and CLI commands are thin shells over these."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import JsonValue
from sqlalchemy.exc import InterfaceError, OperationalError, StatementError

from loop import (
    Agent,
    ApprovalRequired,
    DecisionError,
    LoopResult,
    ModelError,
    StateError,
    SuspendedRunState,
    ToolLoop,
    check_decisions,
)
from persistence.domain import Claim, Reclaimed, Run, RunStatus
from persistence.repository import (
    Clock,
    Event,
    LeaseLostError,
    RunRepository,
    UnknownRunError,
    utcnow,
)
from workers.decisions import DecisionBody, to_loop_decisions
from workers.events import Pending, RunEventSink
from workers.ledger import LedgerExecutor
from workers.registry import Registry, UnknownAgentError

log = logging.getLogger("airlock")

EventType = Literal["run.waiting_for_approval", "run.completed", "run.failed", "run.cancelled"]


class Enqueue(Protocol):
    def __call__(self, run_id: str, delay: float | None = None) -> None:
        """Publish a wake-up for the run. Losing it is safe: the sweeper re-sends."""


class Notify(Protocol):
    def __call__(self, event_type: EventType, run_id: str) -> None:
        """Wake a deliverer of the outbox: a notification of this type was just recorded
        for the run. Losing it is safe: the beat delivers what is due."""


class ConflictError(Exception):
    """The run is not in a state that allows this."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired
        """The approval expired before the decision came."""


@dataclass(frozen=True)
class Limits:
    lease: timedelta = timedelta(seconds=60)
    queued_stale_after: timedelta = timedelta(seconds=60)
    max_attempts: int = 5
    retry_base_delay: float = 1.0
    retry_max_delay: float = 300.0
    events_delay: float = 0.1
    """The longest a segment's events wait in memory while it computes."""


class Outcome(StrEnum):
    SKIPPED = "skipped"
    COMPLETED = "completed"
    SUSPENDED = "suspended"
    FAILED = "failed"
    RETRY = "retry"
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True)
class SegmentResult:
    outcome: Outcome
    retry_in: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class DecisionResult:
    """``recorded``: this request won (202). ``duplicate``: the same decision was already
    applied (200)."""

    result: Literal["recorded", "duplicate"]
    decision: dict[str, JsonValue]
    approver: str | None


@dataclass(frozen=True)
class SweepReport:
    requeued_stale: tuple[str, ...]
    reclaimed: Reclaimed
    expired: tuple[str, ...] = ()


def is_database_error(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError | InterfaceError)


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ModelError):
        return exc.retryable
    return isinstance(exc, ConnectionError | TimeoutError)


@dataclass
class Service:
    repo: RunRepository
    registry: Registry
    enqueue: Enqueue
    notify: Notify | None = None
    """Set when notifications are sent: transitions that start or end a wait record them
    in the outbox, and this wakes a deliverer after the commit."""
    limits: Limits = field(default_factory=Limits)
    clock: Clock = utcnow
    _keeper: _Keeper = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._keeper = _Keeper(self.repo, self.limits.lease, self.limits.events_delay)

    # -- start ---------------------------------------------------------------------

    def start_run(
        self,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
    ) -> tuple[Run, bool]:
        """Create a queued run and wake a worker. The same idempotency key returns the
        first run (``created`` is False) and enqueues nothing."""
        self.registry.get(agent)
        request: dict[str, JsonValue] = {"agent": agent, "input": input, "metadata": metadata or {}}
        run, created = self.repo.create(
            agent,
            input,
            idempotency_key=idempotency_key,
            metadata=metadata,
            first_event=("request", request),
        )
        if created:
            self._wake(run.id)
            log.info("run created", extra={"action": "run.created", "run_id": run.id})
        return run, created

    def _notifies(self, event_type: EventType) -> EventType | None:
        """The notification a transition records in the outbox, if they are sent."""
        return event_type if self.notify is not None else None

    def _announce(self, event_type: EventType, run_id: str) -> None:
        if self.notify is None:
            return
        try:
            self.notify(event_type, run_id)
        except Exception:  # recorded in the outbox: the beat's delivery sends it
            log.warning(
                "could not wake a deliverer; the beat will deliver the notification",
                extra={"action": "notify.wake_failed", "run_id": run_id},
                exc_info=True,
            )

    def _wake(self, run_id: str, delay: float | None = None) -> None:
        try:
            self.enqueue(run_id, delay)
        except Exception:  # the run is queued in the database; the sweeper re-sends
            log.warning(
                "could not publish wake-up; the sweeper will re-send it",
                extra={"action": "run.enqueue_failed", "run_id": run_id},
                exc_info=True,
            )

    # -- segments ------------------------------------------------------------------

    def run_segment(self, run_id: str, owner: str, take_over: str | None = None) -> SegmentResult:
        """Claim the run, advance it to its next stop, record that stop, return.

        A run that is not claimable (a duplicate or redelivered wake-up) is a no-op.
        Database errors propagate: nothing can be recorded, the caller retries.
        """
        run = self.repo.claim(run_id, owner, self.limits.lease, take_over=take_over)
        if run is None:
            log.info(
                "not claimable; skipped", extra={"action": "segment.skipped", "run_id": run_id}
            )
            return SegmentResult(Outcome.SKIPPED)
        log.debug("claimed", extra={"action": "segment.claimed", "run_id": run_id, "owner": owner})
        sink = RunEventSink(self.repo, run.id, owner)
        with self._keeper.hold(run_id, owner, sink):
            try:
                return self._advance(run, owner, sink)
            except LeaseLostError as exc:  # another worker owns the run now: stop, write nothing
                return self._lease_lost(run, owner, str(exc))
            except Exception as exc:
                if is_database_error(exc):
                    raise
                try:
                    sink.flush()  # what the segment did before it failed, counters included
                except LeaseLostError as lost:
                    return self._lease_lost(run, owner, str(lost))
                if is_transient(exc) and run.attempts < self.limits.max_attempts:
                    return self._retry_later(run, owner, exc)
                return self._fail(run, owner, _describe(exc, run))

    def _advance(self, run: Claim, owner: str, sink: RunEventSink) -> SegmentResult:
        agent = self.registry.get(run.agent)
        if run.unreadable is not None:
            raise StateError(run.unreadable)
        state = self.repo.load_state(run) if run.has_checkpoint else None
        if state is not None:
            sink.usage = state.usage
        # the segment's events so far are written before each write
        executor = LedgerExecutor(
            self.repo,
            run.id,
            sink.flush,
            record=sink.record,
            ledger=run.ledger,
            clock=self.clock,
            owner=owner,
        )

        def write_ahead(checkpoint: SuspendedRunState) -> None:
            events, calls = sink.take()
            if not self.repo.checkpoint(run.id, owner, checkpoint, events=events, calls=calls):
                raise LeaseLostError(f"run {run.id} is no longer leased to {owner}")

        loop = ToolLoop(events=sink, executor=executor, write_ahead=write_ahead)
        try:
            if state is None:
                result = loop.run(agent, run.input, run_id=run.id)
            elif not state.awaits_decision:  # redone from a write-ahead checkpoint
                result = loop.resume(agent, state, {})
            else:
                record = self.repo.decision_for(run.id, state.turn_digest)
                if record is None:
                    raise StateError(f"run {run.id} has a checkpoint but no decision for its turn")
                decisions = to_loop_decisions(record.decision, state)
                result = loop.resume(agent, state, decisions, approver=record.approver)
        except ApprovalRequired as pause:
            return self._suspend(run, owner, agent, pause.state, sink.take())
        return self._complete(run, owner, result, sink.take())

    def _suspend(
        self,
        run: Claim,
        owner: str,
        agent: Agent,
        state: SuspendedRunState,
        pending: Pending,
    ) -> SegmentResult:
        expires = self.clock() + agent.approval_ttl if agent.approval_ttl else None
        events, calls = pending
        notify = self._notifies("run.waiting_for_approval")
        if not self.repo.suspend(
            run.id, owner, state, expires, events=events, calls=calls, notify=notify
        ):
            return self._lease_lost(run, owner)
        log.debug("waiting for approval", extra={"action": "segment.suspended", "run_id": run.id})
        self._announce("run.waiting_for_approval", run.id)
        return SegmentResult(Outcome.SUSPENDED)

    def _complete(
        self, run: Claim, owner: str, result: LoopResult, pending: Pending
    ) -> SegmentResult:
        finished = self.repo.finish(
            run.id,
            RunStatus.COMPLETED,
            owner=owner,
            termination=result.termination.value,
            output=result.output,
            iterations=result.iterations,
            usage=result.usage,
            events=pending.events,
            calls=pending.calls,
            notify=self._notifies("run.completed"),
        )
        if not finished:
            return self._lease_lost(run, owner)
        log.debug("completed", extra={"action": "segment.completed", "run_id": run.id})
        self._announce("run.completed", run.id)
        return SegmentResult(Outcome.COMPLETED)

    def _fail(self, run: Claim, owner: str, error: str) -> SegmentResult:
        failed: Event = ("failed", {"error": error})
        if not self.repo.finish(
            run.id,
            RunStatus.FAILED,
            owner=owner,
            error=error,
            events=[failed],
            notify=self._notifies("run.failed"),
        ):
            return self._lease_lost(run, owner)
        log.warning(error, extra={"action": "segment.failed", "run_id": run.id})
        self._announce("run.failed", run.id)
        return SegmentResult(Outcome.FAILED, error=error)

    def _retry_later(self, run: Claim, owner: str, exc: Exception) -> SegmentResult:
        delay = min(self.limits.retry_max_delay, self.limits.retry_base_delay * 2**run.attempts)
        delay *= random.uniform(0.5, 1.5)
        if isinstance(exc, ModelError) and exc.retry_after:
            delay = max(delay, exc.retry_after)
        retry: Event = (
            "retry",
            {"error": _describe(exc, run), "attempt": run.attempts, "delay": delay},
        )
        if not self.repo.requeue(run.id, owner, events=[retry]):
            return self._lease_lost(run, owner)
        log.info("transient error; retrying", extra={"action": "segment.retry", "run_id": run.id})
        self._wake(run.id, delay)
        return SegmentResult(Outcome.RETRY, retry_in=delay, error=str(exc))

    def _lease_lost(self, run: Claim, owner: str, detail: str | None = None) -> SegmentResult:
        log.warning(
            "lost the run's lease before recording the segment; another worker owns it now"
            + (f" ({detail})" if detail else ""),
            extra={"action": "segment.lease_lost", "run_id": run.id, "owner": owner},
        )
        return SegmentResult(Outcome.LEASE_LOST)

    # -- decisions -----------------------------------------------------------------

    def record_decision(
        self,
        run_id: str,
        body: DecisionBody,
        *,
        source: str,
        approver: str | None = None,
        webhook_id: str | None = None,
        also: Sequence[Event] = (),
        expiry: bool = False,
    ) -> DecisionResult:
        """Record a decision for the turn that waits and wake a worker to resume. The
        ``decision`` audit event (and ``also``, before it) is written with the decision.

        Raises ``UnknownRunError`` (no such run), ``DecisionError`` (malformed for this
        turn: unknown call ids, edits that fail the tool's schema) and ``ConflictError``
        (not waiting, another turn, or another decision already won).
        """
        run = self.repo.get(run_id)
        if run is None:
            raise UnknownRunError(f"no run has id {run_id!r}")
        approver = body.approver or approver
        stored = body.stored()
        waits = run.status is RunStatus.WAITING_FOR_APPROVAL
        if waits and run.turn_digest == body.turn_digest and not expiry:
            # the expiry's whole-turn deny fits every turn: it needs no readable state
            self._validate(run, stored)
        audit: Event = (
            "decision",
            {"turn_digest": body.turn_digest, "approver": approver, "source": source, **stored},
        )
        outcome = self.repo.record_decision(
            run.id,
            body.turn_digest,
            stored,
            approver=approver,
            webhook_id=webhook_id,
            events=[*also, audit],
            expiry=expiry,
        )
        match outcome.result:
            case "recorded":
                self._wake(run.id)
                return DecisionResult("recorded", stored, approver)
            case "duplicate":
                assert outcome.stored is not None
                return DecisionResult("duplicate", outcome.stored.decision, outcome.stored.approver)
            case "not_found":
                raise UnknownRunError(f"no run has id {run_id!r}")
            case "conflict":
                reason = outcome.reason or "the decision was not applied"
                raise ConflictError(reason, expired=outcome.expired)

    def _validate(self, run: Run, stored: dict[str, JsonValue]) -> None:
        try:
            agent = self.registry.get(run.agent)
        except UnknownAgentError as exc:
            raise ConflictError(f"{exc}; the run cannot be resumed here") from exc
        state = self.repo.load_state(run)
        check_decisions(agent, state, to_loop_decisions(stored, state))

    def pending(self, run: Run) -> SuspendedRunState | None:
        """The suspended turn an approver must see, while the run waits."""
        if run.status is not RunStatus.WAITING_FOR_APPROVAL:
            return None
        return self.repo.load_state(run)

    # -- operator actions ----------------------------------------------------------

    def cancel(self, run_id: str, *, by: str | None = None, also: Sequence[Event] = ()) -> Run:
        """Cancel an unfinished run; its ``cancelled`` event (and ``also``, before it) is
        written with the transition."""
        run = self.repo.require(run_id)
        cancelled: Event = ("cancelled", {"by": by, "was": run.status.value})
        if not self.repo.cancel(
            run_id, events=[*also, cancelled], notify=self._notifies("run.cancelled")
        ):
            current = self.repo.require(run_id)
            raise ConflictError(f"run is {current.status}; only unfinished runs can be cancelled")
        self._announce("run.cancelled", run_id)
        return self.repo.require(run_id)

    def retry(self, run_id: str, *, by: str | None = None) -> Run:
        """A failed run continues from its last checkpoint; the ledger keeps executed
        calls from running again."""
        run = self.repo.require(run_id)
        retried: Event = ("retry", {"by": by, "previous_error": run.error})
        if not self.repo.retry(run_id, events=[retried]):
            raise ConflictError(f"run is {run.status}; only failed runs can be retried")
        self._wake(run_id)
        return self.repo.require(run_id)

    def expire_approvals(self) -> tuple[str, ...]:
        """Apply each agent's expiry action to runs that waited past ``approval_ttl``."""
        expired: list[str] = []
        for run_id in self.repo.expired_approvals():
            run = self.repo.get(run_id)
            if run is None or run.turn_digest is None:
                continue
            action = self.registry.get(run.agent).on_expiry if run.agent in self.registry else None
            # the 'expired' event is written with the action, so it exists exactly when
            # the action was applied; each action is guarded on the run still waiting on
            # this turn with its approval expired, in its own statement
            event: Event = ("expired", {"action": str(action or "cancel")})
            if action == "deny":
                body = DecisionBody(
                    turn_digest=run.turn_digest, decision="deny", reason="approval expired"
                )
                try:
                    self.record_decision(
                        run_id, body, source="expiry", approver="airlock", also=[event], expiry=True
                    )
                except ConflictError:
                    continue  # decided or cancelled meanwhile
            else:
                cancelled: Event = ("cancelled", {"by": "airlock:expiry", "was": run.status.value})
                notify = self._notifies("run.cancelled")
                events = [event, cancelled]
                if not self.repo.expire(run_id, run.turn_digest, events=events, notify=notify):
                    continue  # decided or cancelled meanwhile
                self._announce("run.cancelled", run_id)
            expired.append(run_id)
        return tuple(expired)

    def sweep(self) -> SweepReport:
        """Recover what a broker dropped or a dead worker left behind."""
        reclaimed = self.repo.reclaim_expired_leases(
            self.limits.max_attempts, notify=self.notify is not None
        )
        for run_id in reclaimed.failed:
            self._announce("run.failed", run_id)
        stale = self.repo.stale_queued(self.limits.queued_stale_after)
        self.repo.touch_queued(stale)
        for run_id in (*reclaimed.requeued, *stale):
            self._wake(run_id)
        if reclaimed.requeued or reclaimed.failed or stale:
            log.info(
                "swept",
                extra={
                    "action": "sweep.done",
                    "requeued": len(reclaimed.requeued),
                    "failed": len(reclaimed.failed),
                    "stale": len(stale),
                },
            )
        return SweepReport(tuple(stale), reclaimed)

    def purge(self, older_than: timedelta, *, progress: Callable[[int], None] | None = None) -> int:
        return self.repo.purge(older_than, progress=progress)


class _Keeper:
    """Keeps the segments this process runs: renews their leases (every third of the
    lease), so a long segment is not reclaimed, and writes the events a segment has
    held for up to ``delay``, so a long model call does not hide what came before it.

    One thread per process while any segment runs (started by the process that needs
    it: a Celery pool child is forked without its parent's threads; gone when no
    segment is left), instead of one per segment, whose start and join would cost
    more than a short segment's writes."""

    def __init__(self, repo: RunRepository, lease: timedelta, delay: float) -> None:
        self._repo = repo
        self._lease = lease
        # every half delay, the events that have waited that long: none waits longer
        # than ``delay``, and a quick segment's events wait for its end
        self._tick = min(delay, lease.total_seconds() / 3) / 2
        self._held: dict[str, tuple[str, RunEventSink]] = {}
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._thread: tuple[int, threading.Thread] | None = None

    @contextmanager
    def hold(self, run_id: str, owner: str, sink: RunEventSink) -> Iterator[None]:
        with self._lock:
            if self._thread is None or self._thread[0] != os.getpid():
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
        renew_every = self._lease.total_seconds() / 3
        renew_at = time.monotonic() + renew_every
        while True:
            time.sleep(self._tick)
            with self._busy:
                with self._lock:
                    held = list(self._held.items())
                    if not held:
                        self._thread = None
                        return
                for run_id, (_, sink) in held:
                    self._flush(run_id, sink)
                if time.monotonic() >= renew_at:
                    renew_at = time.monotonic() + renew_every
                    for run_id, (owner, _) in held:
                        self._renew_one(run_id, owner)

    def _flush(self, run_id: str, sink: RunEventSink) -> None:
        try:
            sink.flush(waited=self._tick)
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
            if not self._repo.renew_lease(run_id, owner, self._lease):
                log.warning("lease lost", extra={"action": "lease.lost", "run_id": run_id})
        except Exception:
            log.warning("lease renewal failed", extra={"action": "lease.error"}, exc_info=True)


def _describe(exc: BaseException, run: Claim) -> str:
    if isinstance(exc, StateError):
        return f"refusing to resume run {run.id}: {exc}"
    if isinstance(exc, DecisionError | UnknownAgentError):
        return str(exc)
    if isinstance(exc, StatementError):  # never the SQL or its parameters: they hold data
        orig = exc.orig if exc.orig is not None else exc
        first = (str(orig).splitlines() or [""])[0][:200]
        return f"the database refused the run's write ({type(orig).__name__}: {first})"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
