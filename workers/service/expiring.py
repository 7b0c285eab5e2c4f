"""Approvals that waited too long: each agent's expiry action (``on_expiry``: deny or
cancel; the policy's ``cancel`` default wins), applied in a statement guarded on the run
still waiting on that turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import JsonValue

from airlock.loop import StateError
from airlock.persistence.domain import Run
from airlock.persistence.store import Clock, Event, RunStore
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import AIRLOCK, Principal, Standing
from airlock.workers.service.registry import Registry
from airlock.workers.service.results import ConflictError
from airlock.workers.service.segments import EventType
from airlock.workers.service.watching import DecisionSeen, Watchers


class Service(Protocol):
    """What expiry uses of the service (``core.Service``)."""

    @property
    def store(self) -> RunStore: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def watchers(self) -> Watchers: ...

    def record_decision(
        self, run_id: str, body: DecisionBody, principal: Principal, *, also: Sequence[Event] = ()
    ) -> object: ...

    def _notifies(self, event_type: EventType) -> EventType | None: ...

    def _announce(self, event_type: EventType, run_id: str) -> None: ...


def expire_approvals(service: Service) -> tuple[str, ...]:
    """Apply each agent's expiry action to runs that waited past ``approval_ttl``."""
    expired: list[str] = []
    for run_id in service.store.queries.expired_approvals():
        run = service.store.runs.get(run_id)
        if run is None or run.turn_digest is None:
            continue
        action = _expiry_action(service, run)
        # the 'expired' event is written with the action, so it exists exactly when
        # the action was applied; each action is guarded on the run still waiting on
        # this turn with its approval expired, in its own statement
        event: Event = ("expired", {"action": str(action or "cancel")})
        if action == "deny":
            body = DecisionBody(
                turn_digest=run.turn_digest, decision="deny", reason="approval expired"
            )
            try:
                service.record_decision(run_id, body, AIRLOCK, also=[event])
            except ConflictError:
                continue  # decided or cancelled meanwhile
        else:
            expiry = acting(AIRLOCK, Standing("operator", [])) | {"by": "airlock:expiry"}
            cancelled: Event = ("cancelled", expiry | {"was": run.status.value})
            notify = service._notifies("run.cancelled")
            events = [event, cancelled]
            if not service.store.transitions.expire(
                run_id, run.turn_digest, events=events, notify=notify
            ):
                continue  # decided or cancelled meanwhile
            service._announce("run.cancelled", run_id)
        expired.append(run_id)
        service.watchers.tell(
            DecisionSeen(
                run_id, AIRLOCK.source, "recorded", AIRLOCK.id, agent=run.agent,
                verdict="expired", suspended_at=run.suspended_at, decided_at=service.clock(),
                trace_context=run.trace_context,
            )
        )  # fmt: skip
    return tuple(expired)


def _expiry_action(service: Service, run: Run) -> str | None:
    """The agent's ``on_expiry``, or ``cancel`` when the policy's judgement of a call
    that asks says so (the strictest wins)."""
    action = service.registry.get(run.agent).on_expiry if run.agent in service.registry else None
    try:
        state = service.store.runs.load_state(run)
    except StateError:
        return action
    defaults = {c.policy.default for c in state.pending_calls if c.requires_approval and c.policy}
    return "cancel" if "cancel" in defaults else action


def acting(principal: Principal, standing: Standing) -> dict[str, JsonValue]:
    """Who cancelled or retried a run, for its event: the principal, how it was
    authenticated (as in a ``decision`` event), and on what ground it may."""
    return {
        "by": principal.id,
        "principal": principal.id,
        "identity": principal.key,
        "auth": principal.auth(standing.roles),
        "authority": standing.ground,
    }
