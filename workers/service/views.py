"""The run view: what the API returns and what notifications carry. Never the raw state."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue

from airlock.loop import (
    Approve,
    DecisionError,
    Deny,
    Edit,
    PendingCall,
    StateError,
    SuspendedRunState,
)
from airlock.persistence.domain import Run, RunEvent
from airlock.persistence.schema import SchemaState, SchemaStatus
from airlock.workers.service import Service, SweeperHealth
from airlock.workers.service.decisions import to_loop_decisions


class UsageView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int
    completion_tokens: int


class PendingCallView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    arguments: dict[str, JsonValue]
    effect: str
    requires_approval: bool
    verdict: str
    """``asks``, ``approved_by_policy``, ``denied_by_policy``, or why no person is asked."""
    policy_reason: str | None
    approvers: list[str] | None
    """The roles that may decide it (empty: any approver; null: the agent is unknown
    here)."""
    quorum: int
    """How many distinct principals must approve it."""
    approvals: list[ApprovalView]
    """The approvals of it recorded so far, toward its quorum."""
    policy: PolicyView | None = None
    """The policy file's judgement of it, made at suspension (null: no file judged it)."""


class PolicyView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: str
    verdict: str
    sha256: str
    """The sha256 of the policy file that judged it."""
    reason: str | None
    error: str | None
    """Why the judgement failed closed (a missing or mistyped argument)."""
    approvers: list[list[str]]
    """Role sets; a deciding principal holds one role of each."""
    quorum: int
    line: str
    """The judgement in one line, for a person."""


class ApprovalView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principal: str
    auth: dict[str, JsonValue]
    decision: str
    arguments: dict[str, JsonValue]
    """The arguments this approval runs the call with (an edit's, or the call's own)."""
    reason: str | None
    """The approver's own words, if any (approvals count together whatever they say)."""
    at: str | None


class PendingView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turn_digest: str | None
    calls: list[PendingCallView]
    suspended_at: str | None
    expires_at: str | None
    error: str | None = None
    """Set when the checkpoint cannot be read (its calls are then empty)."""


class RunView(BaseModel):
    """The run view (``GET /v1/runs/{id}``), for the OpenAPI document: the handlers build
    it with ``run_view`` and send it as it is, unvalidated (a test holds the two to
    each other)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    agent: str
    status: str
    termination: str | None
    iterations: int
    usage: UsageView
    output: str | None
    error: str | None
    metadata: dict[str, JsonValue]
    created_at: str | None
    updated_at: str | None
    pending: PendingView | None


class RunPage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    runs: list[RunView]
    next_cursor: str | None


class EventView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seq: int
    kind: str
    payload: dict[str, JsonValue]
    created_at: str | None


class EventPage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    events: list[EventView]


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def verdict(call: PendingCall) -> dict[str, JsonValue]:
    """What the approval policy said of a call: ``asks`` (a person decides),
    ``approved_by_policy`` or ``denied_by_policy`` (final, with the policy's reason), or
    why no person is asked (``read_only``, ``unknown_tool``, ``invalid_arguments``)."""
    match call.preset, call.preset_source:
        case None, _:
            return {"verdict": "asks", "policy_reason": None}
        case Approve(), "policy":
            return {"verdict": "approved_by_policy", "policy_reason": None}
        case Deny(reason=reason), "policy":
            return {"verdict": "denied_by_policy", "policy_reason": reason or None}
        case _, source:
            return {"verdict": source or "read_only", "policy_reason": None}


def policy_of(call: PendingCall) -> JsonValue:
    """The policy file's judgement of the call (None: no file judged it)."""
    judged = call.policy
    if judged is None:
        return None
    return {
        "rule": judged.rule,
        "verdict": judged.verdict,
        "sha256": judged.sha256,
        "reason": judged.reason or None,
        "error": judged.error,
        "approvers": [list(s) for s in judged.approvers],
        "quorum": judged.quorum,
        "line": judged.line(),
    }


def pending_view(service: Service, run: Run) -> JsonValue:
    """The turn a waiting run waits on, each call with the policy's verdict; ``None``
    for a run that does not wait. An unreadable checkpoint is reported on its own run,
    so every other reads on."""
    times = {"suspended_at": iso(run.suspended_at), "expires_at": iso(run.expires_at)}
    try:
        state = service.pending(run)
    except StateError as exc:
        error = f"the checkpoint cannot be read: {exc}"
        return {"turn_digest": run.turn_digest, "calls": [], "error": error, **times}
    if state is None:
        return None
    rules = {c.id: service.approval_rule(run.agent, c) for c in state.pending_calls}
    quorums = any(rule is not None and rule[1] > 1 for rule in rules.values())
    approvals = approvals_of(service, run, state) if quorums else {}
    calls: list[JsonValue] = []
    for c in state.pending_calls:
        rule = rules[c.id]
        calls.append(
            {
                "id": c.id,
                "name": c.name,
                "arguments": c.arguments,
                "effect": c.effect,
                "requires_approval": c.requires_approval,
                **verdict(c),
                "approvers": list(rule[0]) if rule is not None else None,
                "quorum": rule[1] if rule is not None else 1,
                "approvals": approvals.get(c.id, []),
                "policy": policy_of(c),
            }
        )
    return {"turn_digest": state.turn_digest, "calls": calls, **times}


def approvals_of(
    service: Service, run: Run, state: SuspendedRunState
) -> dict[str, list[JsonValue]]:
    """Per call, the approvals recorded toward its quorum: each principal's approval
    that approves (or edits) it, with the arguments it approved and its reason."""
    found: dict[str, list[JsonValue]] = {}
    for approval in service.approvals(run):
        try:
            decisions = to_loop_decisions(approval.decision, state)
        except (ValueError, DecisionError):
            continue
        for call in state.pending_calls:
            decided = decisions if isinstance(decisions, Approve | Deny) else decisions.get(call.id)
            if isinstance(decided, Approve | Edit) and call.requires_approval:
                edited = isinstance(decided, Edit)
                runs_with = decided.arguments if isinstance(decided, Edit) else call.arguments
                reason = _reason_for(approval.decision, call.id)
                found.setdefault(call.id, []).append(
                    {
                        "principal": approval.principal,
                        "auth": approval.auth,
                        "decision": "edit" if edited else "approve",
                        "arguments": dict(runs_with),
                        "reason": reason,
                        "at": iso(approval.created_at),
                    }
                )
    return found


def _reason_for(decision: dict[str, Any], call_id: str) -> str | None:
    """The reason an approver gave for a call: its own, else the decision's."""
    calls = decision.get("calls")
    own = calls.get(call_id) if isinstance(calls, dict) else None
    if isinstance(own, dict) and own.get("reason"):
        return str(own["reason"])
    reason = decision.get("reason")
    return str(reason) if reason else None


def run_view(service: Service, run: Run) -> dict[str, JsonValue]:
    pending = pending_view(service, run)
    return {
        "id": run.id,
        "agent": run.agent,
        "status": run.status.value,
        "termination": run.termination,
        "iterations": run.iterations,
        "usage": {
            "prompt_tokens": run.usage.prompt_tokens,
            "completion_tokens": run.usage.completion_tokens,
        },
        "output": run.output,
        "error": run.unreadable or run.error,  # a sealed column this key cannot open
        "metadata": run.metadata,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "pending": pending,
    }


def event_view(event: RunEvent) -> dict[str, JsonValue]:
    return {
        "seq": event.seq,
        "kind": event.kind,
        "payload": event.payload,
        "created_at": iso(event.created_at),
    }


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut at a word boundary to at most ``width`` characters
    (the inbox's lines, the CLI's and the demo's event summaries)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    cut = flat[: width - 1]
    space = cut.rfind(" ")
    if flat[width - 1] != " " and space > width // 2:  # cut mid-word: back to its start
        cut = cut[:space]
    return cut.rstrip(",;: ") + "…"


def event_summary(kind: str, payload: dict[str, Any]) -> str:
    """One line of what an audit event says (the CLI's and the demo's tables)."""
    match kind:
        case "llm":
            calls = ", ".join(str(c.get("name")) for c in payload.get("tool_calls", []))
            return f"model call {payload.get('iteration')}: {calls or 'answer'}"
        case "tool":
            result = clip(str(payload.get("result", "")), 60)
            return f"{payload.get('name')} → {payload.get('outcome')}: {result}"
        case "decision" | "approval":
            return _decision_summary(kind, payload)
        case "grant_revoked":
            grant = f"grant {str(payload.get('id'))[:8]} ({payload.get('tool')})"
            return f"{grant} revoked by {payload.get('revoked_by')}"
        case "suspended":
            return "waiting on " + ", ".join(str(c.get("name")) for c in payload.get("calls", []))
        case "request":
            return f"{payload.get('agent')} asked: {clip(str(payload.get('input', '')), 80)}"
        case "completed":
            done = str(payload.get("termination") or "completed").replace("_", " ")
            return f"{done}: {clip(str(payload.get('output') or ''), 100)}"
        case "failed":
            return clip(str(payload.get("error", "")), 120)
        case "resumed":
            return f"resumed after the decision (model calls so far: {payload.get('iterations')})"
        case _:
            return _fields(payload)


def _decision_summary(kind: str, payload: dict[str, Any]) -> str:
    verb = payload.get("decision", "approve") if kind == "decision" else "approval"
    tally = ""
    if "quorum" in payload:
        tally = f" ({len(payload.get('approved_by', []))} of {payload['quorum']})"
    auth = payload.get("auth")
    client = auth.get("client") if isinstance(auth, dict) else None
    via = f"{payload.get('source')}" + (f" (client {client})" if client else "")
    why = f": {payload['reason']}" if payload.get("reason") else ""
    granted = payload.get("grants")
    if isinstance(granted, list) and granted:  # given with this decision
        why += f" (and granted {', '.join(str(g.get('scope')) for g in granted)})"
    return f"{verb}{tally} by {payload.get('approver')} via {via}{why}"


def _fields(payload: dict[str, Any]) -> str:
    """An event with no words of its own: its fields as ``name: value``, each cut."""
    shown = [
        f"{key}: {clip(_plain(value), 40)}"
        for key, value in payload.items()
        if key not in ("auth", "run_id") and value not in (None, "", [], {})
    ]
    return clip("; ".join(shown), 120) or "—"


def _plain(value: object) -> str:
    """A value in words, not JSON: a list's items and a mapping's ``name=value``."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={_plain(v)}" for k, v in value.items())
    return json.dumps(value)


def sweeper_view(health: SweeperHealth) -> dict[str, JsonValue]:
    """Beat's sweeper, for ``/readyz`` and ``airlock stats --json``."""
    age = health.age_seconds
    return {
        "state": health.state.value,
        "last_run_at": iso(health.last_run),
        "age_seconds": None if age is None else round(age, 1),
        "stale_after_seconds": health.stale_after.total_seconds(),
    }


def database_view(status: SchemaStatus) -> dict[str, str]:
    """The database's part of ``/readyz``: whether it can be read (``database``: ``ok``,
    ``absent`` for an SQLite file that is not there yet, ``unreachable``) and whether its
    schema is this version's (``schema``), each ``ok`` or ``state: what to do``, said
    without the database's URL."""
    said = status.explain(named=False)
    match status.state:
        case SchemaState.ABSENT:
            return {"database": f"absent: {said}", "schema": "unknown: there is no database"}
        case SchemaState.UNREACHABLE:
            unknown = "unknown: the database cannot be reached"
            return {"database": f"unreachable: {said}", "schema": unknown}
        case SchemaState.CURRENT:
            return {"database": "ok", "schema": "ok"}
        case _:
            return {"database": "ok", "schema": f"{status.state}: {said}"}
