"""A segment: claim the run, advance its loop to the next stop (an answer, a turn
that waits for approval, a failure), record that stop, return. Nothing waits in
memory past it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from pydantic import JsonValue
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from airlock.loop import (
    Agent,
    AirlockError,
    ApprovalRequired,
    DecisionError,
    LoopResult,
    ModelError,
    StateError,
    SuspendedRunState,
    ToolLoop,
)
from airlock.loop.policy import RunPolicy
from airlock.persistence.domain import Claim, RunStatus
from airlock.persistence.schema import first_line
from airlock.persistence.store import Clock, Event, LeaseLostError, RunStore
from airlock.workers.mcp.guard import McpGuard, review
from airlock.workers.service.backoff import backoff
from airlock.workers.service.decisions import to_loop_decisions
from airlock.workers.service.events import Pending, RunEventSink
from airlock.workers.service.grants import release_for
from airlock.workers.service.keeper import Keeper
from airlock.workers.service.ledger import LedgerExecutor
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.principals import Requester
from airlock.workers.service.registry import Registry, UnknownAgentError
from airlock.workers.service.tracing import NO_TRACES, Traces

log = logging.getLogger("airlock")

EventType = Literal["run.waiting_for_approval", "run.completed", "run.failed", "run.cancelled"]


@dataclass(frozen=True)
class Limits:
    lease: timedelta = timedelta(seconds=60)
    queued_stale_after: timedelta = timedelta(seconds=60)
    max_attempts: int = 5
    retry_base_delay: float = 1.0
    retry_max_delay: float = 300.0
    events_delay: float = 0.1
    """The longest a segment's events wait in memory while it computes."""
    sweep_interval: timedelta = timedelta(seconds=15)
    """How often beat runs the sweeper (``AIRLOCK_SWEEP_INTERVAL``)."""


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


def is_database_error(exc: BaseException) -> bool:
    """The database could not be reached (or no pooled connection came free in time):
    nothing could be recorded, the task retries."""
    return isinstance(exc, OperationalError | InterfaceError | PoolTimeoutError)


class SegmentInterruptedError(AirlockError):
    """The database could not be used (the ``__cause__``; a unit is retried before, up to
    ``AIRLOCK_DB_RETRY_SECONDS``): the segment stopped, recording nothing more, and is
    run again later. ``take_over``: the owner whose claim that retry continues;
    ``adopt``: whether the calls that owner started are the retry's to run (it ran
    none it did not record the result of: none is in doubt)."""

    def __init__(self, why: str, take_over: str, adopt: bool) -> None:
        super().__init__(why)
        self.take_over = take_over
        self.adopt = adopt

    def __reduce__(self) -> tuple[type[SegmentInterruptedError], tuple[str, str, bool]]:
        return type(self), (str(self), self.take_over, self.adopt)  # it crosses processes


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ModelError):
        return exc.retryable
    return isinstance(exc, ConnectionError | TimeoutError)


@dataclass
class Segments:
    store: RunStore
    registry: Registry
    limits: Limits
    clock: Clock
    keeper: Keeper
    wake: Callable[[str, float | None], None]
    notifies: Callable[[EventType], EventType | None]
    """The notification a transition records in the outbox, if they are sent."""
    announce: Callable[[EventType, str], None]
    """Wake a deliverer of the outbox after the commit."""
    policy: PolicyHolder | None = None
    traces: Traces = NO_TRACES

    def run(
        self, run_id: str, owner: str, take_over: str | None = None, *, adopt: bool = False
    ) -> SegmentResult:
        """Claim the run, advance it to its next stop, record that stop, return.

        A run that is not claimable (a duplicate or redelivered wake-up) is a no-op.
        ``take_over``: an earlier owner whose claim this one continues, and (``adopt``)
        whose calls started and never run are this segment's to run
        (``Transitions.claim``). A database that cannot be used raises
        ``SegmentInterruptedError``: nothing can be recorded, the caller retries with
        what it says.
        """
        try:
            run = self.store.transitions.claim(
                run_id, owner, self.limits.lease, take_over=take_over, adopt=adopt
            )
        except Exception as exc:
            if is_database_error(exc):  # held nothing: the retry continues as this would
                continued = take_over or owner
                raise SegmentInterruptedError(
                    _away(exc), continued, adopt or take_over is None
                ) from exc
            raise
        if run is None:
            log.info(
                "not claimable; skipped", extra={"action": "segment.skipped", "run_id": run_id}
            )
            return SegmentResult(Outcome.SKIPPED)
        log.debug("claimed", extra={"action": "segment.claimed", "run_id": run_id, "owner": owner})
        sink = self.keeper.sink(run.id, owner)
        executor = self._executor(run, owner, sink)
        with self.keeper.hold(run_id, owner, sink):
            try:
                return self._held(run, owner, sink, executor)
            except Exception as exc:
                if not is_database_error(exc):
                    raise
                clean = executor.unrecorded is None
                raise SegmentInterruptedError(_away(exc), owner, clean) from exc

    def _held(
        self, run: Claim, owner: str, sink: RunEventSink, executor: LedgerExecutor
    ) -> SegmentResult:
        """The claimed run advanced to its next stop, that stop recorded (database errors
        propagate)."""
        try:
            return self._advance(run, owner, sink, executor)
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

    def _executor(self, run: Claim, owner: str, sink: RunEventSink) -> LedgerExecutor:
        # the segment's events so far are written with each write's ``started`` record
        return LedgerExecutor(
            self.store,
            run.id,
            sink.start_call,
            record=sink.record,
            ledger=run.ledger,
            clock=self.clock,
            owner=owner,
        )

    def _advance(
        self, run: Claim, owner: str, sink: RunEventSink, executor: LedgerExecutor
    ) -> SegmentResult:
        agent = self.registry.get(run.agent)
        if run.unreadable is not None:
            raise StateError(run.unreadable)
        state = self.store.runs.load_state(run) if run.has_checkpoint else None
        if state is not None:
            sink.usage = state.usage

        def write_ahead(checkpoint: SuspendedRunState) -> None:
            events, calls = sink.take()
            if not self.store.transitions.checkpoint(
                run.id, owner, checkpoint, events=events, calls=calls
            ):
                raise LeaseLostError(f"run {run.id} is no longer leased to {owner}")

        rules = {c.id: c.policy.rule for c in state.pending_calls if c.policy} if state else {}
        with self.traces.segment(run.id, agent, run.trace_context, rules) as traced:
            loop = ToolLoop(
                events=traced.wrap(sink),
                executor=McpGuard(executor, self.store, sink.note),
                write_ahead=write_ahead,
                policy=self._policy(run),
            )
            try:
                if state is None:
                    result = loop.run(agent, run.input, run_id=run.id)
                elif not state.awaits_decision:  # redone from a write-ahead checkpoint
                    result = loop.resume(agent, state, {})
                else:
                    decision, approver = self._decision(run, state)
                    decisions = to_loop_decisions(decision, state)
                    result = loop.resume(agent, state, decisions, approver=approver)
            except ApprovalRequired as pause:
                if traced.stored is not None:  # the next segment links to this one
                    self.store.runs.trace(run.id, traced.stored)
                return self._suspend(run, owner, agent, pause.state, sink.take())
            return self._complete(run, owner, result, sink.take())

    def _policy(self, run: Claim) -> RunPolicy | None:
        """The policies this segment judges new turns by, with the run's requester and
        metadata (read only when a policy file is configured)."""
        if self.policy is None or not self.policy.configured:
            return None
        row = self.store.runs.require(run.id)
        return self.policy.for_run(row.requested_by, row.metadata)

    def _requester(self, run: Claim) -> Requester:
        row = self.store.runs.require(run.id)
        return Requester.of(row.requested_by, row.caller)

    def _decision(
        self, run: Claim, state: SuspendedRunState
    ) -> tuple[dict[str, JsonValue], str | None]:
        """The decision for the turn the checkpoint waits on, and who made it: the one
        the claim read with the run, or (were the run's turn another) the ledger's."""
        if run.decision is not None and run.turn_digest == state.turn_digest:
            return self.store.decisions.opened(run.decision), run.approver
        record = self.store.decisions.decision_for(run.id, state.turn_digest)
        if record is None:
            raise StateError(f"run {run.id} has a checkpoint but no decision for its turn")
        return record.decision, record.approver

    def _suspend(
        self,
        run: Claim,
        owner: str,
        agent: Agent,
        state: SuspendedRunState,
        pending: Pending,
    ) -> SegmentResult:
        expires = _expires(self.clock(), agent, state)
        review(self.store, agent, state)  # the MCP calls' fingerprints, as approved
        events, calls = pending
        notify = self.notifies("run.waiting_for_approval")
        release = release_for(self.store, agent, state, lambda: self._requester(run))
        if release is not None:
            moved = self.store.grants.suspend(
                run.id, owner, state, expires,
                release=release, events=events, calls=calls, notify=notify,
            )  # fmt: skip
            if moved == "lost":
                return self._lease_lost(run, owner)
            if moved == "released":
                log.info(
                    "released by standing grants",
                    extra={"action": "segment.granted", "run_id": run.id},
                )
                self.wake(run.id, None)
                return SegmentResult(Outcome.SUSPENDED)
        elif not self.store.transitions.suspend(
            run.id, owner, state, expires, events=events, calls=calls, notify=notify
        ):
            return self._lease_lost(run, owner)
        log.debug("waiting for approval", extra={"action": "segment.suspended", "run_id": run.id})
        self.announce("run.waiting_for_approval", run.id)
        return SegmentResult(Outcome.SUSPENDED)

    def _complete(
        self, run: Claim, owner: str, result: LoopResult, pending: Pending
    ) -> SegmentResult:
        finished = self.store.transitions.finish(
            run.id,
            RunStatus.COMPLETED,
            owner=owner,
            termination=result.termination.value,
            output=result.output,
            iterations=result.iterations,
            usage=result.usage,
            events=pending.events,
            calls=pending.calls,
            notify=self.notifies("run.completed"),
        )
        if not finished:
            return self._lease_lost(run, owner)
        log.debug("completed", extra={"action": "segment.completed", "run_id": run.id})
        self.announce("run.completed", run.id)
        return SegmentResult(Outcome.COMPLETED)

    def _fail(self, run: Claim, owner: str, error: str) -> SegmentResult:
        failed: Event = ("failed", {"error": error})
        if not self.store.transitions.finish(
            run.id,
            RunStatus.FAILED,
            owner=owner,
            error=error,
            events=[failed],
            notify=self.notifies("run.failed"),
        ):
            return self._lease_lost(run, owner)
        log.warning(error, extra={"action": "segment.failed", "run_id": run.id})
        self.announce("run.failed", run.id)
        return SegmentResult(Outcome.FAILED, error=error)

    def _retry_later(self, run: Claim, owner: str, exc: Exception) -> SegmentResult:
        limits = self.limits
        delay = backoff(run.attempts, base=limits.retry_base_delay, cap=limits.retry_max_delay)
        if isinstance(exc, ModelError) and exc.retry_after:
            delay = max(delay, exc.retry_after)
        retry: Event = (
            "retry",
            {"error": _describe(exc, run), "attempt": run.attempts, "delay": delay},
        )
        if not self.store.transitions.requeue(run.id, owner, events=[retry]):
            return self._lease_lost(run, owner)
        log.info("transient error; retrying", extra={"action": "segment.retry", "run_id": run.id})
        self.wake(run.id, delay)
        return SegmentResult(Outcome.RETRY, retry_in=delay, error=str(exc))

    def _lease_lost(self, run: Claim, owner: str, detail: str | None = None) -> SegmentResult:
        log.warning(
            "lost the run's lease before recording the segment; another worker owns it now"
            + (f" ({detail})" if detail else ""),
            extra={"action": "segment.lease_lost", "run_id": run.id, "owner": owner},
        )
        return SegmentResult(Outcome.LEASE_LOST)


def _expires(now: datetime, agent: Agent, state: SuspendedRunState) -> datetime | None:
    """When the approval expires: the agent's ``approval_ttl`` or the policy's shorter
    ``expires_in`` of a call that asks (the strictest wins)."""
    ttls = [agent.approval_ttl] if agent.approval_ttl else []
    ttls += [
        timedelta(seconds=c.policy.expires_in)
        for c in state.pending_calls
        if c.requires_approval and c.policy is not None and c.policy.expires_in is not None
    ]
    return now + min(ttls) if ttls else None


def _away(exc: BaseException) -> str:
    """What a database error says, never its statement or parameters (they hold data)."""
    if isinstance(exc, SQLAlchemyError):
        return f"{type(exc).__name__}: {first_line(exc)}"
    return f"{type(exc).__name__}: {exc}"


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
