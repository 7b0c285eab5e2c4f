"""The use cases. Celery tasks, HTTP handlers and CLI commands are thin shells over these."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import JsonValue
from sqlalchemy import text

from loop import (
    StateError,
    SuspendedRunState,
    check_decisions,
)
from loop.canonical import sha256_hex
from loop.errors import AirlockError
from persistence import schema
from persistence.domain import (
    ACTIVE,
    ApprovalRecord,
    DecisionOutcome,
    Page,
    Reclaimed,
    Run,
    RunEvent,
    RunStatus,
)
from persistence.schema import SchemaStatus
from persistence.store import (
    Clock,
    Event,
    Receipt,
    RunStore,
    UnknownRunError,
    utcnow,
)
from workers.service.decisions import DecisionBody, to_loop_decisions
from workers.service.keeper import Keeper
from workers.service.outbound import (
    MAX_DELIVERIES,
    DeliveryError,
    DeliveryReport,
    Send,
    deliver_due,
)
from workers.service.principals import (
    AIRLOCK,
    OPERATOR_ROLES,
    Authority,
    ForbiddenError,
    Principal,
    Standing,
    authorise,
    may_operate,
)
from workers.service.registry import Registry, UnknownAgentError
from workers.service.segments import (
    EventType,
    Limits,
    Outcome,
    SegmentResult,
    Segments,
    is_database_error,
)
from workers.service.sessions import Sessions

log = logging.getLogger("airlock")

__all__ = [
    "MAX_DELIVERIES",
    "ConflictError",
    "DecisionResult",
    "DeliveryError",
    "DeliveryReport",
    "Enqueue",
    "ForbiddenError",
    "IdempotencyMismatchError",
    "Principal",
    "EventType",
    "Limits",
    "Notify",
    "Outcome",
    "SegmentResult",
    "Service",
    "Stats",
    "SweepReport",
    "is_database_error",
]


class Enqueue(Protocol):
    def __call__(self, run_id: str, delay: float | None = None) -> None:
        """Publish a wake-up for the run. Losing it is safe: the sweeper re-sends."""


class Notify(Protocol):
    def __call__(self, event_type: EventType, run_id: str) -> None:
        """Wake a deliverer of the outbox: a notification of this type was just recorded
        for the run. Losing it is safe: the beat delivers what is due."""


class ConflictError(AirlockError):
    """The run is not in a state that allows this."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired
        """The approval expired before the decision came."""


class IdempotencyMismatchError(ConflictError):
    """The caller used this idempotency key for another request (another agent, input,
    metadata or requester)."""


@dataclass(frozen=True)
class DecisionResult:
    """``recorded``: this request won (202). ``partial``: this principal's approval was
    recorded, more are needed (200). ``duplicate``: the same decision (or this
    principal's same approval) was already applied (200). ``withdrawn``: this
    principal's approval was withdrawn (200)."""

    result: Literal["recorded", "partial", "duplicate", "withdrawn"]
    decision: dict[str, JsonValue]
    approver: str | None
    approved_by: tuple[str, ...] = ()
    """With a quorum: the principals that approved this decision so far."""
    quorum: int = 1


@dataclass(frozen=True)
class SweepReport:
    requeued_stale: tuple[str, ...]
    reclaimed: Reclaimed


SWEEPER = "sweep"
"""The beat job whose last run tells whether a beat is alive."""


class SweeperState(StrEnum):
    NEVER = "never"
    """No sweep is recorded in this database yet (no beat ran against it)."""
    OK = "ok"
    STALE = "stale"
    """None for ``stale_after``: beat, the broker or every worker is down."""


@dataclass(frozen=True)
class SweeperHealth:
    """When the sweeper last ran, and whether that is too long ago: ``never`` (no beat
    has run against this database yet), ``stale`` (none for ``stale_after``) or ``ok``."""

    last_run: datetime | None
    at: datetime
    stale_after: timedelta

    @property
    def age_seconds(self) -> float | None:
        return None if self.last_run is None else (self.at - self.last_run).total_seconds()

    @property
    def state(self) -> SweeperState:
        if self.last_run is None:
            return SweeperState.NEVER
        return SweeperState.STALE if self.at - self.last_run > self.stale_after else SweeperState.OK


def stale_after(sweep_interval: timedelta) -> timedelta:
    """A sweeper silent this long is stale: a few missed runs, and never under a minute
    (a beat restarting, or a slow sweep, is not yet a dead beat)."""
    return max(4 * sweep_interval, timedelta(minutes=1))


@dataclass(frozen=True)
class Stats:
    runs: dict[RunStatus, int]
    oldest_waiting: datetime | None
    """When the longest-waiting run started waiting."""
    expired_leases: int
    finished: dict[int, dict[RunStatus, int]]
    """Runs finished within the last N minutes, by status, for each N asked."""
    notifications_due: int
    notifications_given_up: int
    at: datetime
    sweeper: SweeperHealth

    @property
    def oldest_waiting_seconds(self) -> float | None:
        if self.oldest_waiting is None:
            return None
        return (self.at - self.oldest_waiting).total_seconds()


@dataclass
class Service:
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
    _segments: Segments = field(init=False, repr=False)

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
        )

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
    ) -> tuple[Run, bool]:
        """Create a queued run and wake a worker. ``requested_by``: who asked for it (by
        default they may not approve its calls). Idempotency keys are ``caller``'s own
        (``oidc:<issuer>:<sub>``, ``token``, ``cli``; by default a caller of the Python
        API): the same key with the same request returns the first run (``created``
        is False) and enqueues nothing; with another request it raises
        ``IdempotencyMismatchError``."""
        self.registry.get(agent)
        request = _request(agent, input, metadata or {}, requested_by)
        run, created = self.store.runs.create(
            agent,
            input,
            idempotency_key=idempotency_key,
            metadata=metadata,
            first_event=("request", request),
            requested_by=requested_by,
            caller=caller,
        )
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
        """Claim the run, advance it to its next stop, record that stop, return (see
        ``Segments.run``)."""
        return self._segments.run(run_id, owner, take_over)

    # -- decisions -----------------------------------------------------------------

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
        resume. The ``decision`` audit event (and ``also``, before it) is written with
        the decision. When the calls it approves need a quorum, it is recorded as this
        principal's approval (an ``approval`` event) and the decision is made by the
        approval that completes the quorum. ``sign_in``: the inbox sign-in (its stored
        id) it is made under, re-checked in the decision's transaction.

        Raises ``UnknownRunError`` (no such run), ``DecisionError`` (malformed for this
        turn: unknown call ids, edits that fail the tool's schema), ``ForbiddenError``
        (a role the principal does not hold, its own run, an ``approver`` that is not
        who it is) and ``ConflictError`` (not waiting, another turn, another decision
        already won, or another approval by this principal).
        """
        principal = principal.vouching(body.approver)
        if body.decision == "withdraw":
            return self.withdraw_approval(
                run_id, body.turn_digest, principal, webhook_id=webhook_id
            )
        run = self.store.runs.get(run_id)
        if run is None:
            raise UnknownRunError(f"no run has id {run_id!r}")
        stored = body.stored()
        decisions = self.store.decisions
        receipt = _receipt(principal, webhook_id, body.turn_digest, stored)
        if principal is AIRLOCK:
            # the expiry's whole-turn deny: Airlock's own, guarded on the approval expired
            outcome = decisions.record_decision(
                run.id,
                body.turn_digest,
                stored,
                approver=principal.id,
                receipt=receipt,
                events=[*also, ("decision", self._audit(body, principal, None, stored))],
                expiry=True,
            )
            return self._outcome(run.id, outcome, stored, principal, 1)
        if run.status is not RunStatus.WAITING_FOR_APPROVAL or run.turn_digest != body.turn_digest:
            # Check and act in one step: a decision is authorised on the turn this read
            # shows waiting, and its write re-checks that turn. A turn the read does not
            # show waiting is answered from what is stored (a replay, the same decision
            # again) or refused; nothing is written for it, whatever happens next.
            explained = decisions.explain(run.id, body.turn_digest, stored, receipt)
            return self._outcome(run.id, explained, stored, principal, 1)
        # The authority is worked out on this read's turn: its digest (which binds the run,
        # the suspension and its calls), its checkpoint, the run's agent and requester
        # (never changed). The write below is guarded on the run still waiting on this
        # digest with its approval live, in its own statement (or under the row's lock).
        authority = self._authorise(run, stored, principal)
        payload = self._audit(body, principal, authority, stored)
        if authority.approves and authority.quorum > 1:
            return self._approve(
                run,
                stored=stored,
                principal=principal,
                authority=authority,
                payload=payload,
                receipt=receipt,
                sign_in=sign_in,
                also=also,
            )
        outcome = decisions.record_decision(
            run.id,
            body.turn_digest,
            stored,
            approver=principal.id,
            receipt=receipt,
            sign_in=sign_in,
            events=[*also, ("decision", payload)],
        )
        return self._outcome(run.id, outcome, stored, principal, 1)

    @staticmethod
    def _audit(
        body: DecisionBody,
        principal: Principal,
        authority: Authority | None,
        stored: dict[str, JsonValue],
    ) -> dict[str, JsonValue]:
        """The payload of a decision's (or an approval's) audit event."""
        roles: list[str] = list(authority.roles) if authority else []
        return {
            "turn_digest": body.turn_digest,
            "approver": principal.id,
            "source": principal.source,
            "principal": principal.id,
            "auth": principal.auth(roles),
            "roles": list(roles),
            "covered_calls": list(authority.covered) if authority else [],
            **({"effect": authority.effect} if authority else {}),
            **stored,
        }

    def withdraw_approval(
        self,
        run_id: str,
        turn_digest: str,
        principal: Principal,
        *,
        webhook_id: str | None = None,
    ) -> DecisionResult:
        """Withdraw ``principal``'s approval of the turn that waits, before its quorum is
        reached (an ``approval`` event with ``withdrawn``); ``approved_by``: the
        approvals left. Raises ``UnknownRunError`` and ``ConflictError`` (no such
        approval, or the turn no longer waits)."""
        event: Event = (
            "approval",
            {
                "turn_digest": turn_digest,
                "approver": principal.id,
                "principal": principal.id,
                "source": principal.source,
                "auth": principal.auth([]),
                "withdrawn": True,
            },
        )
        receipt = _receipt(principal, webhook_id, turn_digest, {"decision": "withdraw"})
        outcome = self.store.decisions.withdraw(
            run_id, turn_digest, principal.id, [event], receipt=receipt
        )
        quorum = self._quorum(run_id) if outcome.result == "withdrawn" else 1
        return self._outcome(run_id, outcome, {"decision": "withdraw"}, principal, quorum)

    def _quorum(self, run_id: str) -> int:
        """The quorum the turn the run waits on asks for (1 when it cannot be read)."""
        run = self.store.runs.get(run_id)
        if run is None or run.agent not in self.registry:
            return 1
        try:
            state = self.pending(run)
        except StateError:
            return 1
        agent = self.registry.get(run.agent)
        calls = state.pending_calls if state else ()
        return max((agent.approval_of(c.name)[1] for c in calls if c.requires_approval), default=1)

    def _approve(
        self,
        run: Run,
        *,
        stored: dict[str, JsonValue],
        principal: Principal,
        authority: Authority,
        payload: dict[str, JsonValue],
        receipt: Receipt | None,
        sign_in: str | None,
        also: Sequence[Event],
    ) -> DecisionResult:
        """One principal's approval toward the quorum ``authority`` asks for, on the turn
        the run waits on (which ``authority`` was worked out for)."""
        quorum = authority.quorum

        def audit(approved_by: tuple[str, ...], reached: bool, replaced: bool) -> list[Event]:
            tally: dict[str, JsonValue] = {"approved_by": list(approved_by), "quorum": quorum}
            if replaced:
                tally["replaced"] = True
            return [*also, ("decision" if reached else "approval", payload | tally)]

        assert run.turn_digest is not None
        outcome = self.store.decisions.approve(
            run.id,
            run.turn_digest,
            stored,
            effect=authority.effect,
            principal=principal.id,
            auth=principal.auth(authority.roles),
            quorum=quorum,
            audit=audit,
            receipt=receipt,
            sign_in=sign_in,
        )
        return self._outcome(run.id, outcome, stored, principal, quorum)

    def _outcome(
        self,
        run_id: str,
        outcome: DecisionOutcome,
        stored: dict[str, JsonValue],
        principal: Principal,
        quorum: int,
    ) -> DecisionResult:
        approved_by = outcome.approved_by
        match outcome.result:
            case "recorded":
                self._wake(run_id)
                return DecisionResult("recorded", stored, principal.id, approved_by, quorum)
            case "partial":
                return DecisionResult("partial", stored, principal.id, approved_by, quorum)
            case "duplicate":
                if outcome.stored is None:  # this principal's approval, the quorum not reached
                    return DecisionResult("duplicate", stored, principal.id, approved_by, quorum)
                decided = outcome.stored
                return DecisionResult(
                    "duplicate", decided.decision, decided.approver, approved_by, quorum
                )
            case "withdrawn":
                return DecisionResult("withdrawn", stored, principal.id, approved_by, quorum)
            case "not_found":
                raise UnknownRunError(f"no run has id {run_id!r}")
            case "conflict":
                reason = outcome.reason or "the decision was not applied"
                raise ConflictError(reason, expired=outcome.expired)

    def _authorise(self, run: Run, stored: dict[str, JsonValue], principal: Principal) -> Authority:
        """The decision is well formed for the turn that waits, and the principal may
        make it (``principals.authorise``)."""
        try:
            agent = self.registry.get(run.agent)
        except UnknownAgentError as exc:
            raise ConflictError(f"{exc}; the run cannot be resumed here") from exc
        state = self.store.runs.load_state(run)
        decisions = to_loop_decisions(stored, state)
        check_decisions(agent, state, decisions)
        return authorise(principal, agent, state, decisions, requested_by=run.requested_by)

    def approval_rule(self, agent: str, tool: str) -> tuple[tuple[str, ...], int] | None:
        """Who may decide a call of ``tool`` (roles; none: anyone) and how many distinct
        principals must approve it; None for an agent this process does not know."""
        if agent not in self.registry:
            return None
        return self.registry.get(agent).approval_of(tool)

    def approvals(self, run: Run) -> list[ApprovalRecord]:
        """The approvals recorded toward a quorum for the turn the run waits on."""
        if run.status is not RunStatus.WAITING_FOR_APPROVAL or run.turn_digest is None:
            return []
        return self.store.decisions.approvals(run.id, run.turn_digest)

    def pending(self, run: Run) -> SuspendedRunState | None:
        """The suspended turn an approver must see, while the run waits."""
        if run.status is not RunStatus.WAITING_FOR_APPROVAL:
            return None
        return self.store.runs.load_state(run)

    # -- operator actions ----------------------------------------------------------

    def cancel(self, run_id: str, *, by: Principal, also: Sequence[Event] = ()) -> Run:
        """Cancel an unfinished run on ``by``'s authority (``may_operate``: the operator,
        the requester, or a holder of an operator role). Its ``cancelled`` event names
        the principal and the status it ended, and is written (``also`` before it) with
        the transition. Raises ``UnknownRunError``, ``ForbiddenError``,
        ``ConflictError``."""
        run = self.store.runs.require(run_id)
        # who requested a run never changes: what the read authorises is what the
        # guarded UPDATE applies to
        standing = may_operate(
            by, "cancel", requested_by=run.requested_by, roles=self.operator_roles
        )
        while run.status in ACTIVE:
            cancelled: Event = ("cancelled", _acting(by, standing) | {"was": run.status.value})
            if self.store.transitions.cancel(
                run_id,
                expected=(run.status,),  # so that 'was' is the status it ended
                events=[*also, cancelled],
                notify=self._notifies("run.cancelled"),
            ):
                self._announce("run.cancelled", run_id)
                return self.store.runs.require(run_id)
            run = self.store.runs.require(run_id)
        raise ConflictError(f"run is {run.status}; only unfinished runs can be cancelled")

    def retry(self, run_id: str, *, by: Principal) -> Run:
        """A failed run continues from its last checkpoint, on ``by``'s authority (as for
        ``cancel``); the ledger keeps executed calls from running again. Raises
        ``UnknownRunError``, ``ForbiddenError``, ``ConflictError``."""
        run = self.store.runs.require(run_id)
        standing = may_operate(
            by, "retry", requested_by=run.requested_by, roles=self.operator_roles
        )
        retried: Event = ("retry", _acting(by, standing) | {"previous_error": run.error})
        if not self.store.transitions.retry(run_id, events=[retried]):
            raise ConflictError(f"run is {run.status}; only failed runs can be retried")
        self._wake(run_id)
        return self.store.runs.require(run_id)

    def expire_approvals(self) -> tuple[str, ...]:
        """Apply each agent's expiry action to runs that waited past ``approval_ttl``."""
        expired: list[str] = []
        for run_id in self.store.queries.expired_approvals():
            run = self.store.runs.get(run_id)
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
                    self.record_decision(run_id, body, AIRLOCK, also=[event])
                except ConflictError:
                    continue  # decided or cancelled meanwhile
            else:
                expiry = _acting(AIRLOCK, Standing("operator", [])) | {"by": "airlock:expiry"}
                cancelled: Event = ("cancelled", expiry | {"was": run.status.value})
                notify = self._notifies("run.cancelled")
                events = [event, cancelled]
                if not self.store.transitions.expire(
                    run_id, run.turn_digest, events=events, notify=notify
                ):
                    continue  # decided or cancelled meanwhile
                self._announce("run.cancelled", run_id)
            expired.append(run_id)
        return tuple(expired)

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

    # -- reads ---------------------------------------------------------------------

    def get_run(self, run_id: str) -> Run:
        """Raises ``UnknownRunError``."""
        return self.store.runs.require(run_id)

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        oldest_first: bool = False,
        statuses: Sequence[RunStatus] = (),
        metadata_contains: str | None = None,
    ) -> Page:
        """Newest first (or oldest first), keyset-paginated (see ``Queries.list_runs``).
        Raises ``BadCursorError``."""
        return self.store.queries.list_runs(
            status=status,
            agent=agent,
            limit=limit,
            cursor=cursor,
            oldest_first=oldest_first,
            statuses=statuses,
            metadata_contains=metadata_contains,
        )

    def events(self, run_id: str, *, after: int = 0, limit: int = 1000) -> list[RunEvent]:
        """The run's audit stream. Raises ``UnknownRunError``."""
        events = self.store.events.read(run_id, after=after, limit=limit)
        if not events:  # none after ``after``, or no such run: only then is the run read
            self.get_run(run_id)
        return events

    def stats(self, *, finished_within: Sequence[int] = (5, 15, 60)) -> Stats:
        """The store's figures, for ``airlock stats`` and ``/metrics``."""
        queries, now = self.store.queries, self.clock()
        outbox = self.store.outbox.counts()
        return Stats(
            runs=queries.count_by_status(),
            oldest_waiting=queries.oldest_waiting(),
            expired_leases=queries.expired_lease_count(),
            finished={
                m: queries.finished_since(now - timedelta(minutes=m)) for m in finished_within
            },
            notifications_due=outbox.due,
            notifications_given_up=outbox.given_up,
            at=now,
            sweeper=self.sweeper(),
        )

    def sweeper(self) -> SweeperHealth:
        """When beat's sweeper last ran, and whether that is too long ago."""
        return SweeperHealth(
            self.store.beat.last_run(SWEEPER),
            self.clock(),
            stale_after(self.limits.sweep_interval),
        )

    def ping(self) -> None:
        """Raises unless the database answers."""
        with self.store.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def schema_status(self) -> SchemaStatus:
        """Whether the database's schema is this version's (``persistence.schema``)."""
        return schema.check(self.store.engine)

    def sign_ins(self, secret: str | None) -> Sessions:
        """The inbox's sign-in sessions, kept in this service's store."""
        return Sessions(self.store, secret)

    def hold_connections(self) -> None:
        """The calling thread keeps its database connections between statements: a
        worker's segment thread (see ``Connections.hold``)."""
        self.store.hold_connections()

    # -- notifications ---------------------------------------------------------------

    def add_notification(self, run_id: str, event_type: EventType) -> None:
        """A notification caused outside a transition (one an earlier version queued)."""
        self.store.outbox.add(run_id, event_type)

    def deliver_notifications(
        self, send: Send, render: Callable[[Run], JsonValue], *, limit: int = 100
    ) -> DeliveryReport:
        """Deliver the notifications that are due (see ``outbound.deliver_due``)."""
        return deliver_due(self.store, send, lambda run_id: render(self.get_run(run_id)), limit)


def _receipt(
    principal: Principal, webhook_id: str | None, turn_digest: str, asked: dict[str, JsonValue]
) -> Receipt | None:
    """A signed webhook's receipt: its id, as its approval client's own, and a digest of
    what it asked for (its principal, turn and decision)."""
    if webhook_id is None:
        return None
    request = sha256_hex({"principal": principal.id, "turn_digest": turn_digest, **asked})
    return Receipt(principal.client or principal.method, webhook_id, request)


def _acting(principal: Principal, standing: Standing) -> dict[str, JsonValue]:
    """Who cancelled or retried a run, for its event: the principal, how it was
    authenticated (as in a ``decision`` event), and on what ground it may."""
    return {
        "by": principal.id,
        "principal": principal.id,
        "auth": principal.auth(standing.roles),
        "authority": standing.ground,
    }


def _request(
    agent: str, input: str, metadata: dict[str, JsonValue], requested_by: str | None
) -> dict[str, JsonValue]:
    """What a create asks for (its ``request`` event): a key repeats only this."""
    request: dict[str, JsonValue] = {"agent": agent, "input": input, "metadata": metadata}
    if requested_by is not None:
        request["requested_by"] = requested_by
    return request
