"""Deciding a turn that waits: a decision, an approval toward a quorum, its withdrawal,
each authorised on the turn its guarded write applies to (check and act in one step)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pydantic import JsonValue

from airlock.loop import PendingCall, StateError, SuspendedRunState, check_decisions
from airlock.loop.canonical import sha256_hex
from airlock.persistence.domain import ApprovalRecord, DecisionOutcome, GrantRecord, Run, RunStatus
from airlock.persistence.store import Event, Receipt, RunStore, UnknownRunError
from airlock.workers.service.decisions import DecisionBody, to_loop_decisions
from airlock.workers.service.grants import given, summary
from airlock.workers.service.principals import AIRLOCK, Authority, Principal, approval_of, authorise
from airlock.workers.service.registry import Registry, UnknownAgentError
from airlock.workers.service.results import ConflictError, DecisionResult


@dataclass
class Approvals:
    """The service's decisions (``Service.record_decision`` and its kin delegate here)."""

    store: RunStore
    registry: Registry
    _wake: Callable[[str], None]

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
        asked = stored | ({"grant": body.grant.model_dump()} if body.grant else {})
        receipt = _receipt(principal, webhook_id, body.turn_digest, asked)
        if principal is AIRLOCK:
            return self._expire(run, body, stored, receipt, also)
        if run.status is not RunStatus.WAITING_FOR_APPROVAL or run.turn_digest != body.turn_digest:
            # Check and act in one step: a decision is authorised on the turn this read
            # shows waiting, and its write re-checks that turn. A turn the read does not
            # show waiting is answered from what is stored (a replay, the same decision
            # again) or refused; nothing is written for it, whatever happens next.
            explained = self.store.decisions.explain(run.id, body.turn_digest, stored, receipt)
            result = self._outcome(run.id, explained, stored, principal, 1)
        else:
            result = self._decide(
                run, body, stored, principal=principal, receipt=receipt, sign_in=sign_in,
                also=also,
            )  # fmt: skip
        return self._with_grants(result, run.id, body, principal)

    def _with_grants(
        self, result: DecisionResult, run_id: str, body: DecisionBody, principal: Principal
    ) -> DecisionResult:
        """``result`` with what stands of the grants ``body`` asked for: none when the
        turn was decided already."""
        if body.grant is None:
            return result
        given = self.store.grants.given(run_id, body.turn_digest, principal.id)
        return replace(result, grants=tuple(g.id for g in given))

    def _decide(
        self,
        run: Run,
        body: DecisionBody,
        stored: dict[str, JsonValue],
        *,
        principal: Principal,
        receipt: Receipt | None,
        sign_in: str | None,
        also: Sequence[Event],
    ) -> DecisionResult:
        """A decision (or an approval toward a quorum) on the turn ``run`` shows waiting.
        The authority is worked out on this read's turn: its digest (which binds the run,
        the suspension and its calls), its checkpoint, the run's agent and requester
        (never changed). The write is guarded on the run still waiting on this digest
        with its approval live, in its own statement (or under the row's lock)."""
        authority = self._authorise(run, stored, principal)
        payload = self._audit(body, principal, authority, stored)
        grants = self._grants(run, body, principal, authority)
        if grants:
            payload["grants"] = [summary(g) for g, _ in grants]
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
        outcome = self.store.decisions.record_decision(
            run.id,
            body.turn_digest,
            stored,
            approver=principal.id,
            receipt=receipt,
            sign_in=sign_in,
            events=[*also, ("decision", payload)],
            grants=[self.store.grants.row(g, key) for g, key in grants],
        )
        return self._outcome(run.id, outcome, stored, principal, 1)

    def _grants(
        self, run: Run, body: DecisionBody, principal: Principal, authority: Authority
    ) -> list[tuple[GrantRecord, str | None]]:
        """The standing grants the decision gives (``body.grant``), worked out on the
        turn it is authorised on."""
        if body.grant is None:
            return []
        state = self.store.runs.load_state(run)
        return given(
            body.grant, principal=principal, run=run, state=state, authority=authority,
            now=self.store.now(),
        )  # fmt: skip

    def _expire(
        self,
        run: Run,
        body: DecisionBody,
        stored: dict[str, JsonValue],
        receipt: Receipt | None,
        also: Sequence[Event],
    ) -> DecisionResult:
        """The expiry's whole-turn deny: Airlock's own, guarded on the approval expired."""
        outcome = self.store.decisions.record_decision(
            run.id,
            body.turn_digest,
            stored,
            approver=AIRLOCK.id,
            receipt=receipt,
            events=[*also, ("decision", self._audit(body, AIRLOCK, None, stored))],
            expiry=True,
        )
        return self._outcome(run.id, outcome, stored, AIRLOCK, 1)

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
            **({"policy": authority.policy} if authority and authority.policy else {}),
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
        return max((approval_of(agent, c)[1] for c in calls if c.requires_approval), default=1)

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


def _receipt(
    principal: Principal, webhook_id: str | None, turn_digest: str, asked: dict[str, JsonValue]
) -> Receipt | None:
    """A signed webhook's receipt: its id, as its approval client's own, and a digest of
    what it asked for (its principal, turn and decision)."""
    if webhook_id is None:
        return None
    request = sha256_hex({"principal": principal.id, "turn_digest": turn_digest, **asked})
    return Receipt(principal.client or principal.method, webhook_id, request)
