"""The queue page and bulk decisions: what each row asks in a line (tool, key
arguments, the run's input and metadata), who decided a run that moved on, and a bulk
decision that is confirmed (listing what it will do) before it is made."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from pydantic import JsonValue

from airlock.loop import DecisionError, StateError
from airlock.persistence.domain import Run, RunStatus
from airlock.persistence.store import BadCursorError, UnknownRunError, parse_run_id
from airlock.workers.http.inbox.present import NOTICES, STALE, ago, explained, line, until
from airlock.workers.service import ConflictError, DecisionResult, Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import ForbiddenError
from airlock.workers.service.sessions import Session
from airlock.workers.service.views import pending_view

PAGE = 25
VIEWS = {
    "waiting": ("What waits for a decision", "waiting for a decision"),
    "recent": ("Recently decided or finished", "recently decided or finished"),
    "all": ("All runs", "all"),
}
STATUS_WORDS = {
    "queued": "queued",
    "running": "running",
    "waiting_for_approval": "waiting for a decision",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}


def queue(service: Service, params: Mapping[str, str], session: Session) -> dict[str, Any]:
    """The queue page's context: a page of runs, filtered, as rows."""
    status = params.get("status") or "waiting"
    status = status if status in VIEWS else "waiting"
    agent = params.get("agent") or None
    tool = params.get("tool") or None
    search = (params.get("q") or "").strip()
    runs, next_cursor, error = _runs(service, status, agent, search, params.get("cursor"))
    rows = [row(service, r) for r in runs]
    if tool:  # the calls are in the (sealed) checkpoint: filtered on the page read
        rows = [r for r in rows if tool in r["tools"]]
    filters = {"status": status, "agent": agent or "", "tool": tool or "", "q": search}
    more = urlencode({**filters, "cursor": next_cursor}) if next_cursor else None
    return {
        "session": session,
        "title": VIEWS[status][0],
        "bulk": status == "waiting",
        "rows": rows,
        "filters": filters,
        "statuses": {key: label for key, (_, label) in VIEWS.items()},
        "agents": service.registry.names,
        "more": more,
        "query": urlencode(filters),
        "error": error,
    }


def _runs(
    service: Service, status: str, agent: str | None, search: str, cursor: str | None
) -> tuple[list[Run], str | None, str | None]:
    if search and parse_run_id(search) is not None:
        try:
            return [service.get_run(search)], None, None
        except UnknownRunError:
            return [], None, None
    moved_on = tuple(s for s in RunStatus if s is not RunStatus.WAITING_FOR_APPROVAL)
    try:
        page = service.list_runs(
            status=RunStatus.WAITING_FOR_APPROVAL if status == "waiting" else None,
            statuses=moved_on if status == "recent" else (),
            agent=agent,
            limit=PAGE,
            cursor=cursor or None,
            oldest_first=status == "waiting",
            metadata_contains=search or None,
        )
    except BadCursorError as exc:
        return [], None, str(exc)
    return list(page.runs), page.next_cursor, None


def row(service: Service, run: Run) -> dict[str, Any]:
    """A run as the queue shows it: what it asks (the turn that waits, or the last one
    decided), its input and metadata, and who decided it."""
    now = datetime.now(UTC)
    pending = pending_view(service, run)
    found = pending.get("calls") if isinstance(pending, dict) else None
    calls: list[Any] = found if isinstance(found, list) else []
    decided: dict[str, Any] | None = None
    if not pending:
        calls, decided = _last_turn(service, run)
    asked = [c for c in calls if c.get("requires_approval", True)]
    return {
        "id": run.id,
        "agent": run.agent,
        "status": run.status.value,
        "status_words": STATUS_WORDS.get(run.status.value, run.status.value),
        "requested_by": run.requested_by,
        "waiting": ago(now, run.suspended_at) if pending else None,
        "expires": until(now, run.expires_at) if pending else None,
        "calls": len(calls),
        "asked": [f"{c['name']}({line(c.get('arguments') or {})})" for c in asked],
        "tally": tally(asked) if pending else None,
        "tools": sorted({str(c["name"]) for c in asked}),
        "input": run.input,
        "metadata": line(run.metadata),
        "decided": decided,
        "digest": run.turn_digest,
        "created": run.created_at.strftime("%Y-%m-%d %H:%M:%S"),
    }


def tally(asked: list[Any]) -> str | None:
    """How far the waiting turn is from its quorum, in words ("1 of 2 approvals"); None
    when one approval decides it and none is given yet."""
    quorum = max((int(c.get("quorum") or 1) for c in asked), default=1)
    given = max((len(c.get("approvals") or []) for c in asked), default=0)
    if quorum == 1 and given == 0:
        return None
    return f"{given} of {quorum} approval{'s' if quorum != 1 else ''}"


def _last_turn(service: Service, run: Run) -> tuple[list[Any], dict[str, Any] | None]:
    """The calls of the run's last turn that waited, and the decision that settled it."""
    calls: list[Any] = []
    decided: dict[str, Any] | None = None
    for event in service.events(run.id):
        payload: dict[str, Any] = event.payload
        if event.kind == "suspended" and isinstance(payload.get("calls"), list):
            calls, decided = [c for c in payload["calls"] if isinstance(c, dict)], None
            for c in calls:
                c.setdefault("requires_approval", c.get("preset") is None)
        elif event.kind == "decision" and "principal" in payload:
            edits = payload.get("calls")
            edited = isinstance(edits, dict) and any(
                isinstance(c, dict) and c.get("decision") == "edit" for c in edits.values()
            )
            word = {"approve": "approved", "deny": "denied"}.get(str(payload.get("decision")))
            decided = {"by": payload["principal"], "word": word, "edited": edited}
    return calls, decided


def bulk(service: Service, form: Mapping[str, str], session: Session) -> tuple[int, dict[str, Any]]:
    """A bulk decision: first what it will do, to confirm; once confirmed, each run's
    own decision on the turn the queue showed, and each result."""
    chosen = [k.removeprefix("run.") for k in form if k.startswith("run.")]
    action = form.get("action")
    reason = (form.get("reason") or "").strip() or None
    context: dict[str, Any] = {"session": session, "action": action, "reason": reason}
    error = _bulk_refusal(service, chosen, action, reason)
    if error is not None:
        return 422, {**context, "error": error, "results": [], "confirm": []}
    if form.get("confirmed") != "yes":
        decision: dict[str, JsonValue] = {"decision": action or "", "reason": reason}
        confirm = [_planned(service, run_id, form, session, decision) for run_id in chosen]
        return 200, {**context, "error": None, "results": [], "confirm": confirm}
    body: dict[str, JsonValue] = {"decision": action or "", "reason": reason}
    results = [decide_one(service, run_id, form, session, body) for run_id in chosen]
    return 200, {**context, "error": None, "results": results, "confirm": []}


def _bulk_refusal(
    service: Service, chosen: list[str], action: str | None, reason: str | None
) -> str | None:
    if action not in ("approve", "deny"):
        return "choose approve or deny"
    if action == "deny" and reason is None:
        return "a deny needs a reason: the model is told"
    if not chosen:
        return "select at least one run"
    kinds = set()
    for run_id in chosen:
        try:
            kinds.add(_kind(service, service.get_run(run_id)))
        except UnknownRunError:
            return f"no run has id {run_id!r}"
        except StateError:
            kinds.add(("?", ()))
    return None if len(kinds) == 1 else "select runs of one agent waiting on the same tools"


def _planned(
    service: Service,
    run_id: str,
    form: Mapping[str, str],
    session: Session,
    decision: dict[str, JsonValue],
) -> dict[str, Any]:
    """A run of a bulk decision, as the confirmation lists it, with why its decision
    would be refused: the turn the queue showed is no longer the one that waits, or
    the signed-in approver may not make it."""
    run = service.get_run(run_id)
    digest = form.get(f"digest.{run_id}") or ""
    return {
        **row(service, run),
        "digest": digest,
        "refused": _refused(service, run, digest, session, decision),
    }


def _refused(
    service: Service, run: Run, digest: str, session: Session, decision: dict[str, JsonValue]
) -> str | None:
    try:
        state = service.pending(run)
    except StateError as exc:
        return str(exc)
    if state is None or run.turn_digest != digest:
        return STALE
    if run.agent not in service.registry:
        return None  # the decision says why
    try:
        body = DecisionBody.model_validate({"turn_digest": digest, **decision})
        service.judge_decision(run.id, body, session.principal)
    except (ForbiddenError, DecisionError, ValueError, ConflictError) as exc:
        return str(exc)
    return None


def _kind(service: Service, run: Run) -> tuple[str, tuple[str, ...]]:
    state = service.pending(run)
    calls = state.pending_calls if state else ()
    return run.agent, tuple(sorted({c.name for c in calls if c.requires_approval}))


def decide_one(
    service: Service,
    run_id: str,
    form: Mapping[str, str],
    session: Session,
    decision: dict[str, JsonValue],
) -> dict[str, Any]:
    """One run of a bulk decision: its own decision, on the turn the page showed."""
    body = {"turn_digest": form.get(f"digest.{run_id}") or "", **decision}
    try:
        result: DecisionResult = service.record_decision(
            run_id, DecisionBody.model_validate(body), session.principal, sign_in=session.id
        )
        return {"run_id": run_id, "ok": True, "outcome": NOTICES.get(result.result, result.result)}
    except (UnknownRunError, ConflictError, ForbiddenError, DecisionError, ValueError) as exc:
        return {"run_id": run_id, "ok": False, "outcome": explained(exc)}
