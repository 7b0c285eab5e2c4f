"""Deciding a turn that waits: one pipeline every door calls (the webhook, the HTTP API,
the CLI, the inbox and its preview, the Python API, the expiry): identify the principal
→ authorise it for the turn's calls → check the turn → record → wake after the commit.
Authorisation comes before any answer, a duplicate's included; the write re-checks the
turn it was authorised on (check and act in one step)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pydantic import JsonValue, TypeAdapter, ValidationError

from airlock.loop import Agent, PendingCall, StateError, SuspendedRunState, Usage, check_decisions
from airlock.loop.canonical import sha256_hex
from airlock.loop.decisions import Decisions
from airlock.persistence.domain import ApprovalRecord, DecisionOutcome, GrantRecord, Run, RunStatus
from airlock.persistence.store import Event, Receipt, RunStore, UnknownRunError
from airlock.workers.service.decisions import DecisionBody, to_loop_decisions
from airlock.workers.service.grants import given, summary
from airlock.workers.service.principals import (
    AIRLOCK,
    Authority,
    Principal,
    Requester,
    approval_of,
    authorise,
    identity_of,
)
from airlock.workers.service.registry import Registry, UnknownAgentError
from airlock.workers.service.results import ConflictError, DecisionResult

_CALLS = TypeAdapter(tuple[PendingCall, ...])


@dataclass(frozen=True)
class Judged:
    """A decision identified, authorised and checked against the turn it quotes."""

    run: Run
    principal: Principal
    """Who decides: the verified principal, or the approver it vouches for."""
    agent: Agent
    state: SuspendedRunState
    """The turn the decision quotes (as the checkpoint or the audit holds it)."""
    waiting: bool
    """Whether the run waits on that turn as it was read."""
    stored: dict[str, JsonValue]
    decisions: Decisions
    authority: Authority


@dataclass
class Approvals:
    """The service's decisions (``Service.record_decision`` and its kin delegate here)."""

    store: RunStore
    registry: Registry
    _wake: Callable[[str], None]

    def judge(self, run_id: str, body: DecisionBody, principal: Principal) -> Judged:
        """Identify, authorise and check a decision, recording nothing: what every
        door's decision passes first, and what the inbox previews. Raises
        ``UnknownRunError``, ``ForbiddenError`` (a role it does not hold, its own run,
        an ``approver`` that is not who it is), ``DecisionError`` (malformed for the
        turn) and ``ConflictError`` (a turn this run never waited on, or one it cannot
        read)."""
        principal = principal.vouching(body.approver)
        run = self.store.runs.get(run_id)
        if run is None:
            raise UnknownRunError(f"no run has id {run_id!r}")
        agent = self._agent(run)
        waiting = run.status is RunStatus.WAITING_FOR_APPROVAL
        waiting = waiting and run.turn_digest == body.turn_digest
        state = self._turn(run, body.turn_digest, waiting=waiting)
        stored = body.stored()
        decisions = to_loop_decisions(stored, state)
        check_decisions(agent, state, decisions)
        requester = Requester.of(run.requested_by, run.caller)
        authority = authorise(principal, agent, state, decisions, requester=requester)
        return Judged(run, principal, agent, state, waiting, stored, decisions, authority)

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
        id) it is made under, re-checked in the decision's transaction. A decision for a
        turn no longer waiting is answered from what is stored (a replay, the same
        decision again), once the principal is authorised for that turn.

        Raises as ``judge`` does, and ``ConflictError`` (not waiting, another decision
        already won, the approval expired)."""
        if body.decision == "withdraw":
            decider = principal.vouching(body.approver)
            return self.withdraw_approval(run_id, body.turn_digest, decider, webhook_id=webhook_id)
        if principal is AIRLOCK:
            return self._expire(run_id, body, also)
        try:
            judged = self.judge(run_id, body, principal)
        except _UnknownTurnError:  # nothing to authorise on, and nothing stored to tell
            outcome = self.store.decisions.explain(run_id, body.turn_digest, body.stored(), None)
            return self._outcome(run_id, outcome, body.stored(), principal, 1)
        asked = judged.stored | ({"grant": body.grant.model_dump()} if body.grant else {})
        receipt = _receipt(judged.principal, webhook_id, body.turn_digest, asked)
        if not judged.waiting:
            # Check and act in one step: a turn the read does not show waiting is answered
            # from what is stored or refused; nothing is written for it.
            explained = self.store.decisions.explain(
                run_id, body.turn_digest, judged.stored, receipt
            )
            result = self._outcome(run_id, explained, judged.stored, judged.principal, 1)
        else:
            result = self._record(judged, body, receipt, sign_in=sign_in, also=also)
            run = judged.run  # for the wait's metric and span
            at, trace_context = run.suspended_at, run.trace_context
            result = replace(result, agent=run.agent, suspended_at=at, trace_context=trace_context)
        return self._with_grants(result, judged, body)

    def _record(
        self,
        judged: Judged,
        body: DecisionBody,
        receipt: Receipt | None,
        *,
        sign_in: str | None,
        also: Sequence[Event],
    ) -> DecisionResult:
        """Record the judged decision (or an approval toward a quorum) on the turn it was
        judged on. The write is guarded on the run still waiting on this digest with its
        approval live, in its own statement (or under the row's lock)."""
        run, principal, authority, stored = (
            judged.run, judged.principal, judged.authority, judged.stored,
        )  # fmt: skip
        payload = _audit(body.turn_digest, principal, authority, stored)
        grants = self._grants(judged, body)
        if grants:
            payload["grants"] = [summary(g) for g, _ in grants]
        if authority.approves and authority.quorum > 1:
            return self._approve(judged, payload, receipt, sign_in=sign_in, also=also)
        outcome = self.store.decisions.record_decision(
            run.id,
            body.turn_digest,
            stored,
            approver=principal.id,
            identity=principal.key,
            receipt=receipt,
            sign_in=sign_in,
            events=[*also, ("decision", payload)],
            grants=[self.store.grants.row(g, key) for g, key in grants],
        )
        return self._outcome(run.id, outcome, stored, principal, 1)

    def _grants(self, judged: Judged, body: DecisionBody) -> list[tuple[GrantRecord, str | None]]:
        """The standing grants the decision gives (``body.grant``), worked out on the
        turn it is authorised on."""
        if body.grant is None:
            return []
        return given(
            body.grant, principal=judged.principal, run=judged.run, state=judged.state,
            authority=judged.authority, now=self.store.now(),
        )  # fmt: skip

    def _with_grants(
        self, result: DecisionResult, judged: Judged, body: DecisionBody
    ) -> DecisionResult:
        """``result`` with what stands of the grants ``body`` asked for: none when the
        turn was decided already."""
        if body.grant is None:
            return result
        who = judged.principal
        found = self.store.grants.given(judged.run.id, body.turn_digest, who.id)
        mine = [g for g in found if identity_of(g.auth, g.granted_by) == who.key]
        return replace(result, grants=tuple(g.id for g in mine))

    def _expire(self, run_id: str, body: DecisionBody, also: Sequence[Event]) -> DecisionResult:
        """The expiry's whole-turn deny: Airlock's own, guarded on the approval expired."""
        stored = body.stored()
        outcome = self.store.decisions.record_decision(
            run_id,
            body.turn_digest,
            stored,
            approver=AIRLOCK.id,
            identity=AIRLOCK.key,
            events=[*also, ("decision", _audit(body.turn_digest, AIRLOCK, None, stored))],
            expiry=True,
        )
        return self._outcome(run_id, outcome, stored, AIRLOCK, 1)

    def withdraw_approval(
        self,
        run_id: str,
        turn_digest: str,
        principal: Principal,
        *,
        webhook_id: str | None = None,
    ) -> DecisionResult:
        """Withdraw ``principal``'s approval (its identity's) of the turn that waits,
        before its quorum is reached (an ``approval`` event with ``withdrawn``);
        ``approved_by``: the approvals left. Raises ``UnknownRunError`` and
        ``ConflictError`` (no such approval, or the turn no longer waits)."""
        event: Event = ("approval", _audit(turn_digest, principal, None, {}) | {"withdrawn": True})
        receipt = _receipt(principal, webhook_id, turn_digest, {"decision": "withdraw"})
        outcome = self.store.decisions.withdraw(
            run_id, turn_digest, principal.id, [event], identity=principal.key, receipt=receipt
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
        return max((approval_of(agent, c)[1] for c in calls if c.requires_approval), default=1)

    def _approve(
        self,
        judged: Judged,
        payload: dict[str, JsonValue],
        receipt: Receipt | None,
        *,
        sign_in: str | None,
        also: Sequence[Event],
    ) -> DecisionResult:
        """One principal's approval toward the quorum its authority asks for, on the
        turn the run waits on (which the authority was worked out for)."""
        run, principal, authority = judged.run, judged.principal, judged.authority
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
            judged.stored,
            effect=authority.effect,
            principal=principal.id,
            identity=principal.key,
            auth=principal.auth(authority.roles),
            quorum=quorum,
            audit=audit,
            receipt=receipt,
            sign_in=sign_in,
        )
        return self._outcome(run.id, outcome, judged.stored, principal, quorum)

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

    def _agent(self, run: Run) -> Agent:
        try:
            return self.registry.get(run.agent)
        except UnknownAgentError as exc:
            raise ConflictError(f"{exc}; the run cannot be resumed here") from exc

    def _turn(self, run: Run, digest: str, *, waiting: bool) -> SuspendedRunState:
        """The turn ``digest`` names: the checkpoint the run waits on (or, once decided,
        still holds), else as its ``suspended`` event recorded it (a run that has moved
        on). Raises ``_UnknownTurnError`` for a turn this run never waited on."""
        if waiting or (run.turn_digest == digest and run.has_checkpoint):
            try:
                return self.store.runs.load_state(run)
            except StateError:
                if waiting:
                    raise
                # a run read after its decision may finish (its checkpoint cleared) before
                # the checkpoint is read back: its audit still holds the turn
        after = 0
        while events := self.store.events.read(run.id, after=after):
            for event in events:
                if event.kind == "suspended" and event.payload.get("turn_digest") == digest:
                    return _recorded_turn(run, digest, event.payload)
            after = events[-1].seq
        raise _UnknownTurnError(digest)

    def approval_rule(self, agent: str, call: PendingCall) -> tuple[tuple[str, ...], int] | None:
        """Who may decide ``call`` (roles, the policy's sets flattened; none: anyone) and
        how many distinct principals must approve it; None for an agent not known here."""
        if agent not in self.registry:
            return None
        sets, quorum = approval_of(self.registry.get(agent), call)
        return tuple(dict.fromkeys(r for roles in sets for r in roles)), quorum

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


class _UnknownTurnError(ConflictError):
    """The digest names no turn this run waited on."""


def _recorded_turn(run: Run, digest: str, payload: dict[str, JsonValue]) -> SuspendedRunState:
    """A decided turn as its ``suspended`` event recorded it: its calls, with the policy's
    judgements; enough to authorise a principal on it, never to resume it."""
    try:
        calls = _CALLS.validate_python(payload.get("calls", []))
    except ValidationError as exc:
        raise ConflictError(f"the turn {digest} cannot be read back: {exc}") from exc
    return SuspendedRunState(
        run_id=run.id, agent_name=run.agent, agent_fingerprint="", tool_names=(),
        transcript=(), pending_calls=calls, iterations=0, usage=Usage(), max_iterations=0,
        token_budget=None, trace=(), turn_digest=digest,
    )  # fmt: skip


def _audit(
    turn_digest: str,
    principal: Principal,
    authority: Authority | None,
    stored: dict[str, JsonValue],
) -> dict[str, JsonValue]:
    """The payload of a decision's (or an approval's) audit event: who (the name shown,
    and the identity), how authenticated, with which roles, and what."""
    roles: list[str] = list(authority.roles) if authority else []
    return {
        "turn_digest": turn_digest,
        "approver": principal.id,
        "source": principal.source,
        "principal": principal.id,
        "identity": principal.key,
        "auth": principal.auth(roles),
        "roles": list(roles),
        "covered_calls": list(authority.covered) if authority else [],
        **({"effect": authority.effect} if authority else {}),
        **({"policy": authority.policy} if authority and authority.policy else {}),
        **stored,
    }


def _receipt(
    principal: Principal, webhook_id: str | None, turn_digest: str, asked: dict[str, JsonValue]
) -> Receipt | None:
    """A signed webhook's receipt: its id, as its approval client's own, and a digest of
    what it asked for (its principal, turn and decision)."""
    if webhook_id is None:
        return None
    # within one client, the approver's name is its subject: as before identities were kept
    request = sha256_hex({"principal": principal.id, "turn_digest": turn_digest, **asked})
    return Receipt(principal.client or principal.method, webhook_id, request)
