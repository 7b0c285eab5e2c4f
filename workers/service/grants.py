"""Standing grants: an approver's approval that stands for a time, of exactly the call
they saw (``call``: a repeat of it by the agent, in any run) or of a tool within one run
(``run``). Given with a decision (its body's ``grant``), in the decision's transaction;
used when a turn asks and grants cover every call that asks, as the grantor's own
approval of it would be (the same roles, quorum and separation of duties, judged on the
turn); recorded, listed, revoked, and audited as decisions are."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import JsonValue

from airlock.loop import Agent, DecisionError, PendingCall, SuspendedRunState
from airlock.loop.canonical import canonical_json, sha256_hex
from airlock.persistence.domain import GrantRecord, Release, Run
from airlock.persistence.store import RunStore, UnknownRunError
from airlock.workers.service.decisions import GrantBody
from airlock.workers.service.principals import (
    Authority,
    Method,
    Principal,
    Requester,
    approval_of,
    refusal,
)

GRANT = "grant"
"""The ``source`` (and ``auth.method``) of a decision that grants made."""


class UnknownGrantError(UnknownRunError):
    """No grant has this id (404)."""


def call_key(agent: str, tool: str, arguments: dict[str, JsonValue]) -> str:
    """What a ``call`` grant is found by: the agent, the tool and the exact arguments."""
    return sha256_hex({"agent": agent, "tool": tool, "arguments": arguments})


def grantor_auth(principal: Principal) -> dict[str, JsonValue]:
    """How the grantor was authenticated, and every role it holds: a release is
    authorised by these, as the grantor's approval of the released call would be."""
    auth = principal.auth(sorted(principal.roles))
    auth["every_role"] = principal.every_role
    auth["identity"] = principal.key
    return auth


def given(
    body: GrantBody,
    *,
    principal: Principal,
    run: Run,
    state: SuspendedRunState,
    authority: Authority,
    now: datetime,
) -> list[tuple[GrantRecord, str | None]]:
    """The grants a decision gives: one per call it approves as asked (a grant is of a
    call as the agent asks it, so an edited call is not granted). Raises
    ``DecisionError`` (422) when it approves no call as asked, or when the calls need a
    quorum (a grant stands for one principal's approval)."""
    if authority.quorum > 1:
        raise DecisionError(
            f"these calls need {authority.quorum} approvals: a standing grant stands for "
            "one approver's, and cannot be given for them"
        )
    approved = [
        c
        for c in state.pending_calls
        if c.id in authority.covered and _as_asked(authority.effect.get(c.id), c)
    ]
    if not approved:
        raise DecisionError("the decision approves no call as it was asked: nothing to grant")
    expires = now + timedelta(seconds=body.seconds)
    found = []
    for call in approved:
        record = GrantRecord(
            id=str(uuid.uuid4()),
            agent=run.agent,
            tool=call.name,
            scope=body.scope,
            run_id=run.id if body.scope == "run" else None,
            arguments=dict(call.arguments) if body.scope == "call" else None,
            granted_by=principal.id,
            auth=grantor_auth(principal),
            reason=None,
            source={"run_id": run.id, "turn_digest": state.turn_digest, "call_id": call.id},
            created_at=now,
            expires_at=expires,
            revoked_at=None,
            revoked_by=None,
            uses=0,
            last_used_at=None,
        )
        key = call_key(run.agent, call.name, dict(call.arguments)) if body.scope == "call" else None
        found.append((record, key))
    return found


def _as_asked(effect: JsonValue, call: PendingCall) -> bool:
    """Whether ``effect`` approves ``call`` with exactly its asked arguments, compared as
    canonical JSON (as a grant matches them): Python's ``==`` takes ``true`` and
    ``1.0`` for ``1``, and an edit to either would grant the ``1`` nobody approved."""
    asked: JsonValue = {"approve": dict(call.arguments)}
    return effect is not None and canonical_json(effect) == canonical_json(asked)


def summary(grant: GrantRecord) -> dict[str, JsonValue]:
    """A grant as a decision's audit event names it."""
    return {
        "id": grant.id,
        "scope": grant.scope,
        "tool": grant.tool,
        "granted_by": grant.granted_by,
        "expires_at": grant.expires_at.isoformat(),
    }


def grantor_of(grant: GrantRecord) -> Principal:
    """The principal that gave ``grant``, as it was verified then: its name, identity and
    every role it held."""
    auth = grant.auth
    roles = auth.get("roles")
    client, issuer = auth.get("client"), auth.get("issuer")
    method: Method = "api"
    match auth.get("method"):
        case "webhook" | "oidc" | "cli" | "inbox" as given:
            method = given
    return Principal(
        id=grant.granted_by,
        method=method,
        roles=frozenset(r for r in roles if isinstance(r, str))
        if isinstance(roles, list)
        else frozenset(),
        every_role=auth.get("every_role") is True,
        client=client if isinstance(client, str) else None,
        issuer=issuer if isinstance(issuer, str) else None,
    )


def _may_release(
    grant: GrantRecord, agent: Agent, run_id: str, call: PendingCall, requester: Requester
) -> bool:
    """Whether ``grant`` covers ``call`` of the turn that asks: its tool, its exact
    arguments (``call``) or its run (``run``), and its grantor could approve the call
    alone now (the roles the turn's judgement asks for, a quorum of one, not the run's
    requester unless the agent allows self-approval)."""
    if grant.agent != agent.name or grant.tool != call.name:
        return False
    if grant.scope == "run" and grant.run_id != run_id:
        return False
    if grant.scope == "call" and (
        grant.arguments is None
        or call_key(grant.agent, grant.tool, grant.arguments)
        != call_key(agent.name, call.name, dict(call.arguments))
    ):
        return False
    grantor = grantor_of(grant)
    if approval_of(agent, call)[1] > 1 or refusal(grantor, agent, call) is not None:
        return False
    return agent.self_approval or not requester.is_(grantor)


def release_for(
    store: RunStore,
    agent: Agent,
    state: SuspendedRunState,
    requester: Callable[[], Requester],
) -> Release | None:
    """The release of a turn that asks, when live grants cover every call that asks:
    the decision (an approval of the whole turn, made by the grants' grantors) and its
    audit event. None when any asking call is not covered. ``requester``: who
    requested the run (read only when a grant is found)."""
    asking = [c for c in state.pending_calls if c.requires_approval]
    if not asking:
        return None
    keys = [call_key(agent.name, c.name, dict(c.arguments)) for c in asking]
    grants = store.grants.matching(state.run_id, sorted({c.name for c in asking}), keys)
    if not grants:
        return None
    asked_by = requester()
    chosen: dict[str, GrantRecord] = {}
    for call in asking:
        grant = next(
            (g for g in grants if _may_release(g, agent, state.run_id, call, asked_by)), None
        )
        if grant is None:
            return None
        chosen[call.id] = grant
    grantors = sorted({g.granted_by for g in chosen.values()})
    approver = ", ".join(grantors)[:200]
    decision: dict[str, JsonValue] = {"decision": "approve", "reason": None}
    ids = tuple(dict.fromkeys(g.id for g in chosen.values()))
    event: dict[str, JsonValue] = {
        "turn_digest": state.turn_digest,
        "approver": approver,
        "source": GRANT,
        "principal": approver,
        "auth": {"method": GRANT, "grants": list(ids)},
        "roles": [],
        "covered_calls": [c.id for c in asking],
        "grants": {call_id: summary(g) for call_id, g in chosen.items()},
        **decision,
    }
    return Release(ids, approver, decision, event)


def view(grant: GrantRecord, now: datetime) -> dict[str, JsonValue]:
    """A grant as the API and the CLI show it."""
    return {
        "id": grant.id,
        "state": grant.state(now),
        "agent": grant.agent,
        "tool": grant.tool,
        "scope": grant.scope,
        "run_id": grant.run_id,
        "arguments": grant.arguments,
        "granted_by": grant.granted_by,
        "auth": grant.auth,
        "source": grant.source,
        "created_at": grant.created_at.isoformat(),
        "expires_at": grant.expires_at.isoformat(),
        "revoked_at": grant.revoked_at.isoformat() if grant.revoked_at else None,
        "revoked_by": grant.revoked_by,
        "uses": grant.uses,
        "last_used_at": grant.last_used_at.isoformat() if grant.last_used_at else None,
    }
