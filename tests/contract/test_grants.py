"""Issue 31: standing grants, on both databases.

An approver approves a refund and grants it: a repeat of exactly the same call (another
run of the agent) is released without a person, a changed one waits; a run grant covers
the tool within its run only; revoking stops it. The release is decided in the
transaction that suspends the turn, which locks each grant and re-checks it: a
revocation raced in before each of its statements either stops the release (it
committed before the grant's lock was taken) or waits for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import JsonValue, ValidationError
from sqlalchemy import Engine, event

from airlock.loop import (
    AssistantMessage,
    DecisionError,
    Effect,
    ModelResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    tool,
)
from airlock.loop.agent import Agent
from airlock.loop.messages import Message
from airlock.loop.tools import ToolSchema
from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.service import ConflictError, ForbiddenError, Limits, Principal, Service
from airlock.workers.service.decisions import CallDecisionBody, DecisionBody, GrantBody
from airlock.workers.service.registry import Registry
from tests.conftest import FakeClock

ISSUER = "https://issuer.test"
ALICE = Principal(id="alice", method="oidc", roles=frozenset({"support"}), issuer=ISSUER)
BOB = Principal(id="bob", method="oidc", roles=frozenset({"support"}), issuer=ISSUER)
EVE = Principal(id="eve", method="oidc", roles=frozenset(), issuer=ISSUER)
OPS = Principal.trusted("ops")
REFUNDED: list[dict[str, JsonValue]] = []


@tool(effect=Effect.WRITE, approvers=["support"])
def refund(order_id: str, amount_cents: int) -> str:
    REFUNDED.append({"order_id": order_id, "amount_cents": amount_cents})
    return f"refunded {amount_cents} on {order_id}"


@tool(effect=Effect.WRITE, approvers=["support"], quorum=2)
def wire(amount_cents: int) -> str:
    return f"wired {amount_cents}"


class RefundModel:
    """``refund ORDER AMOUNT [ORDER AMOUNT …]``: one refund call per turn, in order, then
    an answer; ``wire AMOUNT``: one wire."""

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        asked = next(m for m in transcript if isinstance(m, UserMessage)).content.split()
        done = sum(1 for m in transcript if isinstance(m, ToolResultMessage))
        pairs = list(zip(asked[1::2], asked[2::2], strict=False))
        if asked[0] == "wire" and done == 0:
            call = ToolCall("w0", "wire", {"amount_cents": int(asked[1])})
            return ModelResponse(AssistantMessage(None, (call,)), Usage())
        if asked[0] == "refund" and done < len(pairs):
            order, amount = pairs[done]
            args: dict[str, JsonValue] = {"order_id": order, "amount_cents": int(amount)}
            call = ToolCall(f"c{done}", "refund", args)
            return ModelResponse(AssistantMessage(None, (call,)), Usage())
        return ModelResponse(AssistantMessage("done", ()), Usage())


def support_agent(**kwargs: Any) -> Agent:
    return Agent(name="support", model=RefundModel(), tools=[refund, wire], **kwargs)


def make_service(engine: Engine, clock: FakeClock, agent: Agent | None = None) -> Service:
    return Service(
        store=RunStore(engine, clock=clock, cipher=StateCipher(None)),
        registry=Registry([agent or support_agent()]),
        enqueue=lambda run_id, delay=None: None,
        limits=Limits(retry_base_delay=0.01),
        clock=clock,
    )


def start(service: Service, text: str, by: str | None = None) -> str:
    run, _ = service.store.runs.create("support", text, requested_by=by)
    service.run_segment(run.id, "worker")
    return run.id


def digest(service: Service, run_id: str) -> str:
    run = service.store.runs.require(run_id)
    assert run.status is RunStatus.WAITING_FOR_APPROVAL, run.status
    assert run.turn_digest is not None
    return run.turn_digest


def approve_and_grant(
    service: Service, run_id: str, scope: str = "call", who: Principal = ALICE, **extra: Any
) -> None:
    body = DecisionBody(
        turn_digest=digest(service, run_id),
        decision="approve",
        grant=GrantBody.model_validate({"scope": scope, "expires_in": "1h"}),
        **extra,
    )
    assert service.record_decision(run_id, body, who).result == "recorded"


def status(service: Service, run_id: str) -> RunStatus:
    return service.store.runs.require(run_id).status


@pytest.fixture
def service(engine: Engine, clock: FakeClock) -> Service:
    REFUNDED.clear()
    return make_service(engine, clock)


def test_a_grant_releases_exactly_the_same_call_until_it_is_revoked(service: Service) -> None:
    first = start(service, "refund 17 500")
    approve_and_grant(service, first)
    (grant,) = service.grants.list()
    assert (grant.scope, grant.tool, grant.granted_by) == ("call", "refund", "alice")
    assert grant.arguments == {"order_id": "17", "amount_cents": 500}
    service.run_segment(first, "worker")
    assert status(service, first) is RunStatus.COMPLETED

    repeat = start(service, "refund 17 500")  # the same call, another run
    assert status(service, repeat) is RunStatus.QUEUED  # released: nobody was asked
    decided = service.store.decisions.decision_for(
        repeat, service.store.runs.require(repeat).turn_digest or ""
    )
    assert decided is not None and decided.approver == "alice"
    events = service.store.events.read(repeat)
    (decision,) = [e for e in events if e.kind == "decision"]
    assert decision.payload["source"] == "grant"
    assert decision.payload["auth"] == {"method": "grant", "grants": [grant.id]}
    assert not [e for e in events if e.kind == "notified"]
    service.run_segment(repeat, "worker")
    assert status(service, repeat) is RunStatus.COMPLETED
    assert REFUNDED == [{"order_id": "17", "amount_cents": 500}] * 2
    assert service.grants.get(grant.id).uses == 1

    changed = start(service, "refund 17 501")
    assert status(service, changed) is RunStatus.WAITING_FOR_APPROVAL
    other_order = start(service, "refund 18 500")
    assert status(service, other_order) is RunStatus.WAITING_FOR_APPROVAL

    revoked = service.grants.revoke(grant.id, by=ALICE)
    assert revoked.revoked_by == "alice"
    assert service.grants.list() == []
    after = start(service, "refund 17 500")
    assert status(service, after) is RunStatus.WAITING_FOR_APPROVAL
    with pytest.raises(ConflictError, match="was revoked by alice"):
        service.grants.revoke(grant.id, by=ALICE)
    (audit,) = [e for e in service.store.events.read(first) if e.kind == "grant_revoked"]
    assert audit.payload["revoked_by"] == "alice"


def test_a_run_grant_covers_the_tool_in_its_run_only(service: Service) -> None:
    run_id = start(service, "refund 17 500 18 900")
    approve_and_grant(service, run_id, scope="run")
    service.run_segment(run_id, "worker")  # the first refund runs; the second is granted
    assert status(service, run_id) is RunStatus.QUEUED
    service.run_segment(run_id, "worker")
    assert status(service, run_id) is RunStatus.COMPLETED
    assert [r["order_id"] for r in REFUNDED] == ["17", "18"]
    other = start(service, "refund 18 900")
    assert status(service, other) is RunStatus.WAITING_FOR_APPROVAL


def test_a_grant_stands_for_its_grantor_only_where_they_could_approve(
    engine: Engine, clock: FakeClock
) -> None:
    service = make_service(engine, clock)
    first = start(service, "refund 17 500", by="bob")
    approve_and_grant(service, first, who=ALICE)
    # bob requested this run: alice's grant releases it (she could approve it) …
    assert status(service, start(service, "refund 17 500", by="bob")) is RunStatus.QUEUED
    # … but not alice's own run (she may not approve her own calls)
    assert status(service, start(service, "refund 17 500", by="alice")) is (
        RunStatus.WAITING_FOR_APPROVAL
    )


def test_a_grant_expires(service: Service, clock: FakeClock) -> None:
    first = start(service, "refund 17 500")
    approve_and_grant(service, first)
    clock.advance(seconds=3601)
    assert service.grants.list() == []
    assert status(service, start(service, "refund 17 500")) is RunStatus.WAITING_FOR_APPROVAL
    (grant,) = service.grants.list(state="all")
    with pytest.raises(ConflictError, match="expired"):
        service.grants.revoke(grant.id, by=OPS)
    service.purge(timedelta(days=1))
    assert service.grants.list(state="all") == [grant]  # ended within the window: kept
    clock.advance(days=2)
    service.purge(timedelta(days=1))
    assert service.grants.list(state="all") == []


def test_bad_grants_are_refused_and_change_nothing(service: Service) -> None:
    run_id = start(service, "refund 17 500")
    turn = digest(service, run_id)
    for bad in ({"scope": "forever", "expires_in": "1h"}, {"scope": "call", "expires_in": "31d"},
                {"scope": "call", "expires_in": "soon"}, {"scope": "call", "expires_in": -5},
                {"scope": "call", "expires_in": "1h", "tool": "*"}):  # fmt: skip
        with pytest.raises(ValidationError):
            GrantBody.model_validate(bad)
    with pytest.raises(ValidationError, match="given with an approval"):
        DecisionBody.model_validate(
            {"turn_digest": turn, "decision": "deny", "grant": {"scope": "call", "expires_in": 60}}
        )
    edited = DecisionBody(
        turn_digest=turn,
        decision="approve",
        calls={
            "c0": CallDecisionBody(decision="edit", arguments={"order_id": "17", "amount_cents": 5})
        },
        grant=GrantBody(scope="call", expires_in=60),
    )
    with pytest.raises(DecisionError, match="nothing to grant"):
        service.record_decision(run_id, edited, ALICE)
    with pytest.raises(ForbiddenError):
        approve_and_grant(service, run_id, who=EVE)
    wire_run = start(service, "wire 100")
    with pytest.raises(DecisionError, match="need 2 approvals"):
        approve_and_grant(service, wire_run)
    assert service.grants.list(state="all") == []
    assert status(service, run_id) is RunStatus.WAITING_FOR_APPROVAL
    with pytest.raises(ForbiddenError, match="may not revoke"):
        approve_and_grant(service, run_id)
        (grant,) = service.grants.list()
        service.grants.revoke(grant.id, by=EVE)
    (grant,) = service.grants.list()
    assert service.grants.get(grant.id).revoked_at is None


def test_a_revocation_raced_at_every_statement_of_the_release(
    engine: Engine, clock: FakeClock
) -> None:
    """Revoke before each statement the releasing segment sends (in a thread, given a
    second: one that waits on the grant's lock finishes after the segment). A release
    never follows a revocation that committed before the segment took the grant's lock,
    and a revocation that waited for a release finds the grant used."""
    service = make_service(engine, clock)
    seen: set[str] = set()
    for k in range(80):
        approve_and_grant(service, start(service, "refund 17 500"))
        (grant,) = service.grants.list()
        run, _ = service.store.runs.create("support", "refund 17 500")
        done = threading.Event()
        at_lock: list[bool] = []
        started: list[threading.Thread] = []

        def revoke(grant_id: str = grant.id, done: threading.Event = done) -> None:
            service.grants.revoke(grant_id, by=OPS)
            done.set()

        hook = _race(k, revoke, started, done, at_lock)
        try:
            service.run_segment(run.id, "worker")
        finally:
            event.remove(Engine, "before_cursor_execute", hook)
        if not started:  # k is past the segment's last statement: every boundary was tried
            assert status(service, run.id) is RunStatus.QUEUED
            break
        started[0].join(10)
        assert done.is_set(), f"k={k}: the revocation never finished"
        if status(service, run.id) is RunStatus.QUEUED:
            assert at_lock == [False], f"k={k}: released after a revocation committed"
            assert service.grants.get(grant.id).uses == 1
            seen.add("released")
        else:
            assert status(service, run.id) is RunStatus.WAITING_FOR_APPROVAL
            assert service.grants.get(grant.id).uses == 0
            seen.add("waiting")
    else:
        pytest.fail("the segment sent more statements than the sweep tries")
    assert seen == {"released", "waiting"}, seen


def _race(
    k: int,
    action: Any,
    started: list[threading.Thread],
    done: threading.Event,
    at_lock: list[bool],
) -> Any:
    """Start ``action`` before the calling thread's ``k``-th statement (and give it a
    second); note, when the calling thread sends the statement that locks the grants,
    whether ``action`` was done."""
    actor, count = threading.get_ident(), [0]

    def on_cursor(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.get_ident() != actor:
            return
        if count[0] == k:
            thread = threading.Thread(target=action, daemon=True)
            started.append(thread)
            thread.start()
            thread.join(1.0)
        count[0] += 1
        if "FROM grants" in statement and "grants.id IN" in statement:
            at_lock.append(done.is_set())

    event.listen(Engine, "before_cursor_execute", on_cursor)
    return on_cursor


def test_a_revocation_and_its_audit_event_are_one_write(service: Service) -> None:
    """A revocation whose ``grant_revoked`` event cannot be written is not made: the
    grant still stands and a retry revokes it with its event (were they two writes, the
    retry would be refused as already revoked and the run's audit would never say so)."""
    first = start(service, "refund 17 500")
    approve_and_grant(service, first)
    (grant,) = service.grants.list()

    def refuse_events(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "INSERT INTO run_events" in statement:
            raise RuntimeError("the database went away")

    event.listen(Engine, "before_cursor_execute", refuse_events)
    try:
        with pytest.raises(RuntimeError, match="went away"):
            service.grants.revoke(grant.id, by=ALICE)
    finally:
        event.remove(Engine, "before_cursor_execute", refuse_events)
    assert service.grants.get(grant.id).revoked_at is None
    assert status(service, start(service, "refund 17 500")) is RunStatus.QUEUED
    service.grants.revoke(grant.id, by=ALICE)
    (audit,) = [e for e in service.store.events.read(first) if e.kind == "grant_revoked"]
    assert audit.payload["id"] == grant.id and audit.payload["revoked_by"] == "alice"


def test_a_grant_outlives_its_purged_run_and_is_revoked_there_without_an_event(
    service: Service, clock: FakeClock
) -> None:
    """``airlock purge`` takes a run grant with its run (ON DELETE CASCADE); a call
    grant given on a purged run still stands, and is revoked (the grant's row keeps who
    revoked it, no run is left for the event)."""
    first = start(service, "refund 17 500")
    body = DecisionBody(turn_digest=digest(service, first), decision="approve",
                        grant=GrantBody(scope="call", expires_in="30d"))  # fmt: skip
    assert service.record_decision(first, body, ALICE).result == "recorded"
    service.run_segment(first, "worker")
    second = start(service, "refund 18 100 19 200")
    body = DecisionBody(turn_digest=digest(service, second), decision="approve",
                        grant=GrantBody(scope="run", expires_in="30d"))  # fmt: skip
    assert service.record_decision(second, body, ALICE).result == "recorded"
    service.run_segment(second, "worker")
    service.run_segment(second, "worker")
    assert status(service, second) is RunStatus.COMPLETED
    clock.advance(days=2)
    assert service.store.retention.purge(timedelta(days=1)) == 2
    (grant,) = service.grants.list(state="all")
    assert grant.scope == "call"
    assert service.grants.revoke(grant.id, by=ALICE).revoked_by == "alice"
    assert status(service, start(service, "refund 17 500")) is RunStatus.WAITING_FOR_APPROVAL


def test_a_turn_whose_approval_expires_at_once_is_not_released(
    engine: Engine, clock: FakeClock
) -> None:
    """An approval that expires before the release could be made (an ``approval_ttl``
    of a millisecond on a clock that moves) is left to the expiry: the turn waits,
    nothing fails."""
    service = make_service(engine, clock)
    approve_and_grant(service, start(service, "refund 17 500"))

    class Ticking(FakeClock):
        def __call__(self) -> datetime:
            self.advance(seconds=0.01)
            return super().__call__()

    ticking = Ticking()
    ticking.now = clock()
    hasty = make_service(engine, ticking, support_agent(approval_ttl=timedelta(milliseconds=1)))
    run_id = start(hasty, "refund 17 500")
    assert status(hasty, run_id) is RunStatus.WAITING_FOR_APPROVAL
    (grant,) = hasty.grants.list(state="all")
    assert grant.uses == 0


@tool(effect=Effect.WRITE)
def tag(value: JsonValue) -> str:
    """A tool whose argument takes any JSON: 1, 1.0 and true are three values to it."""
    return f"tagged {value!r}"


class TagModel:
    """One ``tag`` call with the input's JSON as its ``value``, then an answer."""

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        asked = next(m for m in transcript if isinstance(m, UserMessage)).content
        if any(isinstance(m, ToolResultMessage) for m in transcript):
            return ModelResponse(AssistantMessage("done", ()), Usage())
        call = ToolCall("t0", "tag", {"value": json.loads(asked)})
        return ModelResponse(AssistantMessage(None, (call,)), Usage())


@pytest.mark.parametrize(
    ("asked", "edited"), [(1, True), (1, 1.0), ([0], [False]), ({"a": 1}, {"a": 1.0})]
)
def test_an_edit_equal_only_in_python_is_not_approved_as_asked(
    engine: Engine, clock: FakeClock, asked: JsonValue, edited: JsonValue
) -> None:
    """A grant stands for the calls approved exactly as asked: an edit to ``true`` of an
    asked ``1`` (Python's ``True == 1``), or to ``1.0``, is an edit, and grants nothing.
    Else the approver, who ran ``true``, would have let ``1`` stand without seeing it."""
    agent = Agent(name="support", model=TagModel(), tools=[tag])
    service = make_service(engine, clock, agent)
    run, _ = service.store.runs.create("support", json.dumps(asked))
    service.run_segment(run.id, "worker")
    body = DecisionBody(
        turn_digest=digest(service, run.id),
        decision="approve",
        calls={"t0": CallDecisionBody(decision="edit", arguments={"value": edited})},
        grant=GrantBody(scope="call", expires_in="1h"),
    )
    with pytest.raises(DecisionError, match="nothing to grant"):
        service.record_decision(run.id, body, ALICE)
    assert service.grants.list(state="all") == []
    assert status(service, run.id) is RunStatus.WAITING_FOR_APPROVAL
