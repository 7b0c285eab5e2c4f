"""The use cases. Celery tasks, HTTP handlers and CLI commands are thin shells over these."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import JsonValue

from airlock.loop import (
    PendingCall,
    SuspendedRunState,
)
from airlock.persistence.domain import (
    ACTIVE,
    ApprovalRecord,
    Run,
    RunStatus,
)
from airlock.persistence.store import (
    Clock,
    Event,
    RunStore,
    utcnow,
)
from airlock.workers.service.approving import Approvals, Judged
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.expiring import acting as _acting
from airlock.workers.service.expiring import expire_approvals
from airlock.workers.service.grant_desk import GrantDesk
from airlock.workers.service.keeper import Keeper
from airlock.workers.service.notifying import Notifying
from airlock.workers.service.policy_file import PolicyHolder
from airlock.workers.service.principals import (
    AIRLOCK,
    OPERATOR_ROLES,
    Principal,
    Requester,
    may_operate,
)
from airlock.workers.service.registry import GATEWAY, Registry
from airlock.workers.service.results import (
    SWEEPER,
    ConflictError,
    DecisionResult,
    Enqueue,
    IdempotencyMismatchError,
    Notify,
    SweepReport,
)
from airlock.workers.service.segments import (
    EventType,
    Limits,
    SegmentResult,
    Segments,
)
from airlock.workers.service.sessions import Sessions
from airlock.workers.service.tracing import NO_TRACES, Traces
from airlock.workers.service.watching import REFUSALS, DecisionSeen, Watchers, refusal, seen_of

if TYPE_CHECKING:
    from airlock.workers.mcp.pins import McpDesk

log = logging.getLogger("airlock")


@dataclass
class Service(Notifying):
    store: RunStore
    registry: Registry
    enqueue: Enqueue
    notify: Notify | None = None
    """Set when notifications are sent: transitions that start or end a wait record them
    in the outbox, and this wakes a deliverer after the commit."""
    limits: Limits = field(default_factory=Limits)
    clock: Clock = utcnow
    keeper: Keeper | None = None
    """Renews the leases of this process's segments and writes their held events (by
    default, one thread per process; tests pass one they step)."""
    operator_roles: frozenset[str] = OPERATOR_ROLES
    """Whoever holds one of these may cancel and retry any run
    (``AIRLOCK_OPERATOR_ROLES``)."""
    policy: PolicyHolder | None = None
    """The policy files (``AIRLOCK_POLICY``, ``AIRLOCK_POLICY_SHADOW``) turns are judged by."""
    grants: GrantDesk = field(init=False, repr=False)
    """Standing grants: list, show, revoke."""
    watchers: Watchers = field(default_factory=lambda: Watchers([]))
    """Told what each decision request came to (``watching``): the metrics, the traces."""
    traces: Traces = NO_TRACES
    """The runs' traces (``tracing``): off unless the ``OTEL_*`` variables ask for them."""
    _segments: Segments = field(init=False, repr=False)
    _approvals: Approvals = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keeper = self.keeper or Keeper(self.store, self.limits.lease, self.limits.events_delay)
        self._segments = Segments(
            store=self.store,
            registry=self.registry,
            limits=self.limits,
            clock=self.clock,
            keeper=keeper,
            wake=self._wake,
            notifies=self._notifies,
            announce=self._announce,
            policy=self.policy,
            traces=self.traces,
        )
        self._approvals = Approvals(self.store, self.registry, self._wake)
        self.grants = GrantDesk(self.store, self.operator_roles)
        self.watchers.add(self.traces.decided)

    # -- start ---------------------------------------------------------------------

    def start_run(
        self,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        metadata: dict[str, JsonValue] | None = None,
        requested_by: str | None = None,
        caller: str = "api",
        traceparent: str | None = None,
        built_in: bool = False,
    ) -> tuple[Run, bool]:
        """Create a queued run and wake a worker. ``requested_by``: who asked for it (by
        default they may not approve its calls). Idempotency keys are ``caller``'s own
        (``oidc:<issuer>:<sub>``, ``token``, ``cli``; by default a caller of the Python
        API): the same key with the same request returns the first run (``created``
        is False) and enqueues nothing; with another request it raises
        ``IdempotencyMismatchError``. ``traceparent``: the caller's trace, which the
        run's continues (when traces are on). ``built_in``: Airlock starts a run of one of
        its own agents (the gateway); any other caller is refused them."""
        self.registry.get(agent) if built_in else self.registry.startable(agent)
        request = _request(agent, input, metadata or {}, requested_by)
        with self.traces.run(agent, traceparent) as traced:
            run, created = self.store.runs.create(
                agent,
                input,
                idempotency_key=idempotency_key,
                metadata=metadata,
                first_event=("request", request),
                requested_by=requested_by,
                caller=caller,
                trace_context=traced.context,
            )
            traced.created(run.id)
        if (
            not created
            and _request(run.agent, run.input, run.metadata, run.requested_by) != request
        ):
            raise IdempotencyMismatchError(
                f"idempotency key {idempotency_key!r} was used for another request "
                f"(run {run.id}); use a new key for a new request"
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
        except Exception as exc:  # recorded in the outbox: the beat's delivery sends it
            log.warning(
                f"could not wake a deliverer ({_one_line(exc)}); "
                "the beat will deliver the notification",
                extra={"action": "notify.wake_failed", "run_id": run_id},
            )

    def _wake(self, run_id: str, delay: float | None = None) -> None:
        try:
            self.enqueue(run_id, delay)
        except Exception as exc:  # the run is queued in the database; the sweeper re-sends
            log.warning(
                f"could not publish the run's wake-up ({_one_line(exc)}); it stays queued "
                "in the database and beat's sweeper re-sends it",
                extra={"action": "run.enqueue_failed", "run_id": run_id},
            )

    # -- segments ------------------------------------------------------------------

    def run_segment(
        self, run_id: str, owner: str, take_over: str | None = None, *, adopt: bool = False
    ) -> SegmentResult:
        """Claim the run, advance it to its next stop, record that stop, return (see
        ``Segments.run``). Raises ``SegmentInterruptedError`` when the database cannot be
        used: retry with its ``take_over`` and ``adopt``."""
        return self._segments.run(run_id, owner, take_over, adopt=adopt)

    # -- decisions (airlock.workers.service.approving) ------------------------------------

    def record_decision(
        self,
        run_id: str,
        body: DecisionBody,
        principal: Principal,
        *,
        webhook_id: str | None = None,
        sign_in: str | None = None,
        also: Sequence[Event] = (),
    ) -> DecisionResult:
        """Record ``principal``'s decision for the turn that waits and wake a worker to
        resume (see ``Approvals.record_decision``); the watchers are told what it came
        to (the expiry's are told by ``expire_approvals``)."""
        told = self.watchers.tell if principal is not AIRLOCK else lambda _: None
        try:
            result = self._approvals.record_decision(
                run_id, body, principal, webhook_id=webhook_id, sign_in=sign_in, also=also
            )
        except REFUSALS as exc:
            told(DecisionSeen(run_id, principal.source, refusal(exc), principal.id))
            raise
        told(seen_of(run_id, principal, result, self.clock()))
        return result

    def judge_decision(self, run_id: str, body: DecisionBody, principal: Principal) -> Judged:
        """Identify, authorise and check a decision, recording nothing: what a door shows
        before it is sent (see ``Approvals.judge``)."""
        return self._approvals.judge(run_id, body, principal)

    def withdraw_approval(
        self, run_id: str, turn_digest: str, principal: Principal, *, webhook_id: str | None = None
    ) -> DecisionResult:
        """Withdraw ``principal``'s approval of the turn that waits, before its quorum
        (see ``Approvals.withdraw_approval``)."""
        return self._approvals.withdraw_approval(
            run_id, turn_digest, principal, webhook_id=webhook_id
        )

    def approval_rule(self, agent: str, call: PendingCall) -> tuple[tuple[str, ...], int] | None:
        """Who may decide a call of ``tool`` and how many must approve it."""
        return self._approvals.approval_rule(agent, call)

    def approvals(self, run: Run) -> list[ApprovalRecord]:
        """The approvals recorded toward a quorum for the turn the run waits on."""
        return self._approvals.approvals(run)

    def pending(self, run: Run) -> SuspendedRunState | None:
        """The suspended turn an approver must see, while the run waits."""
        return self._approvals.pending(run)

    # -- operator actions ----------------------------------------------------------

    def cancel(
        self,
        run_id: str,
        *,
        by: Principal,
        also: Sequence[Event] = (),
        undecided: bool = False,
    ) -> Run:
        """Cancel an unfinished run on ``by``'s authority (``may_operate``: the operator,
        the requester, or a holder of an operator role). Its ``cancelled`` event names
        the principal and the status it ended, and is written (``also`` before it) with
        the transition. With ``undecided``, only while no call of the run was decided or
        began: it waits for approval, or is queued and never suspended (each checked by
        the cancelling statement). Raises ``UnknownRunError``, ``ForbiddenError``,
        ``ConflictError``."""
        run = self.store.runs.require(run_id)
        # who requested a run never changes: what the read authorises is what the
        # guarded UPDATE applies to
        requester = Requester.of(run.requested_by, run.caller)
        standing = may_operate(by, "cancel", requester=requester, roles=self.operator_roles)
        while run.status in ACTIVE:
            fresh = run.status is RunStatus.QUEUED and run.turn_digest is None
            if undecided and run.status is not RunStatus.WAITING_FOR_APPROVAL and not fresh:
                raise ConflictError(f"run is {run.status}; its call can no longer be withdrawn")
            cancelled: Event = ("cancelled", _acting(by, standing) | {"was": run.status.value})
            if self.store.transitions.cancel(
                run_id,
                expected=(run.status,),  # so that 'was' is the status it ended
                events=[*also, cancelled],
                notify=self._notifies("run.cancelled"),
                unsuspended=undecided and fresh,
            ):
                self._announce("run.cancelled", run_id)
                return self.store.runs.require(run_id)
            run = self.store.runs.require(run_id)
        raise ConflictError(f"run is {run.status}; only unfinished runs can be cancelled")

    def retry(self, run_id: str, *, by: Principal) -> Run:
        """A failed run continues from its last checkpoint, on ``by``'s authority (as for
        ``cancel``); the ledger keeps executed calls from running again. Not a run of the
        MCP gateway's agent (its client is answered how it ended). Raises
        ``UnknownRunError``, ``ForbiddenError``, ``ConflictError``."""
        run = self.store.runs.require(run_id)
        requester = Requester.of(run.requested_by, run.caller)
        standing = may_operate(by, "retry", requester=requester, roles=self.operator_roles)
        if run.agent == GATEWAY:  # its client was, or will be, answered what it ended with
            raise ConflictError(
                "a run of the MCP gateway's agent is not retried: its client is answered "
                "how it ended, and calls again for a new approval"
            )
        retried: Event = ("retry", _acting(by, standing) | {"previous_error": run.error})
        if not self.store.transitions.retry(run_id, events=[retried]):
            raise ConflictError(f"run is {run.status}; only failed runs can be retried")
        self._wake(run_id)
        return self.store.runs.require(run_id)

    def expire_approvals(self) -> tuple[str, ...]:
        """Apply each agent's expiry action to runs that waited past ``approval_ttl``."""
        return expire_approvals(self)

    def sweep(self) -> SweepReport:
        """Recover what a broker dropped or a dead worker left behind, and record that
        the sweeper ran (``sweeper``)."""
        reclaimed = self.store.transitions.reclaim_expired_leases(
            self.limits.max_attempts, notify=self.notify is not None
        )
        for run_id in reclaimed.failed:
            self._announce("run.failed", run_id)
        stale = self.store.queries.stale_queued(self.limits.queued_stale_after)
        self.store.transitions.touch_queued(stale)
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
        self.store.beat.ran(SWEEPER)
        return SweepReport(tuple(stale), reclaimed)

    def purge(self, older_than: timedelta, *, progress: Callable[[int], None] | None = None) -> int:
        return self.store.retention.purge(older_than, progress=progress)

    def recount(self) -> dict[RunStatus, int]:
        """Count the runs per status again and set the tallies ``stats`` and the queue's
        mark read (a repair: the database's triggers keep them exact)."""
        self.store.tallies.recount()
        return self.store.queries.count_by_status()

    def sign_ins(self, secret: str | None) -> Sessions:
        """The inbox's sign-in sessions, kept in this service's store."""
        return Sessions(self.store, secret)

    def mcp(self) -> McpDesk:
        """The MCP tools' pins and drift (``airlock mcp list|pin``)."""
        from airlock.workers.mcp.pins import McpDesk  # noqa: PLC0415 - the SDK on demand

        return McpDesk(self.store)

    def hold_connections(self) -> None:
        """The calling thread keeps its database connections between statements: a
        worker's segment thread (see ``Connections.hold``)."""
        self.store.hold_connections()


def _request(
    agent: str, input: str, metadata: dict[str, JsonValue], requested_by: str | None
) -> dict[str, JsonValue]:
    """What a create asks for (its ``request`` event): a key repeats only this."""
    request: dict[str, JsonValue] = {"agent": agent, "input": input, "metadata": metadata}
    if requested_by is not None:
        request["requested_by"] = requested_by
    return request


def _one_line(exc: BaseException) -> str:
    """An expected failure (a broker out of reach) as one line, not a traceback."""
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
