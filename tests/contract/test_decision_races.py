"""Issue 26 (1 and 5): who decides a turn, raced at every statement boundary, on both
databases.

A decision by one principal (the actor) is driven while a competitor acts on the same
run: the run suspends on the turn the decision quotes, the approval expires, the run is
cancelled, another principal approves toward the quorum, or another denies. The
competitor is started in a thread right before the actor's k-th statement (a hook on
every statement the actor's thread sends, SQLAlchemy's and the driver's), for each k;
a competitor that waits on a lock the actor holds finishes after it. Whatever the
order, no decision is stored without a principal who may decide that exact turn, and
no run is released by fewer distinct authorised approvals than its quorum.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

import pytest
from pydantic import JsonValue
from sqlalchemy import Engine, event

from airlock.loop import Agent, Effect, ExpiryAction, ScriptedModel, tool
from airlock.loop.state import PendingCall, turn_digest
from airlock.persistence.crypto import StateCipher
from airlock.persistence.domain import RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.service import ConflictError, Limits, Outcome, Service
from airlock.workers.service.decisions import CallDecisionBody, DecisionBody
from airlock.workers.service.principals import ForbiddenError, Principal
from airlock.workers.service.registry import Registry
from tests.conftest import FakeClock

TREASURY = frozenset({"treasury"})
ISSUER = "https://issuer.test"


def person(name: str, roles: frozenset[str] = TREASURY) -> Principal:
    return Principal(id=name, method="oidc", roles=roles, issuer=ISSUER)


MALLORY = person("mallory")  # holds the role, but requested the run
DAVE = person("dave", frozenset())  # holds no role
ALICE, BOB, CAROL = person("alice"), person("bob"), person("carol")
OPS = Principal.trusted("ops")
AUTHORISED = {"alice", "bob", "carol"}
"""Who may approve the transfer: the role, and not the requester."""
QUORUM = 2
TRANSFER: dict[str, JsonValue] = {"id": "t1", "name": "transfer", "arguments": {"amount": 5000}}


@tool(effect=Effect.WRITE, approvers=["treasury"], quorum=QUORUM)
def transfer(amount: int) -> str:
    return f"moved {amount}"


def treasury_agent() -> Agent:
    steps: list[dict[str, JsonValue]] = [{"tool_calls": [TRANSFER]}, {"content": "done"}]
    return Agent(
        name="treasury",
        model=ScriptedModel(steps),
        tools=[transfer],
        approval_ttl=timedelta(seconds=10),
        on_expiry=ExpiryAction("deny"),
    )


def make_service(engine: Engine, clock: FakeClock) -> Service:
    return Service(
        store=RunStore(engine, clock=clock, cipher=StateCipher(None)),
        registry=Registry([treasury_agent()]),
        enqueue=lambda run_id, delay=None: None,
        limits=Limits(retry_base_delay=0.01),
        clock=clock,
    )


def first_digest(run_id: str) -> str:
    """The digest of the run's first suspension, known before it suspends: the model
    is deterministic and names its call's id."""
    call = PendingCall("t1", "transfer", {"amount": 5000}, Effect.WRITE.value)
    return turn_digest(run_id, 1, (call,))


def approve(digest: str, **extra: Any) -> DecisionBody:
    return DecisionBody(turn_digest=digest, decision="approve", **extra)


def deny(digest: str) -> DecisionBody:
    return DecisionBody(turn_digest=digest, decision="deny", reason="not this month")


def attempt(service: Service, run_id: str, body: DecisionBody, who: Principal) -> str:
    try:
        return service.record_decision(run_id, body, who).result
    except ForbiddenError:
        return "forbidden"
    except ConflictError:
        return "conflict"


Competitor = Callable[[Service, FakeClock, str, str], object]

COMPETITORS: dict[str, Competitor] = {
    "suspension": lambda s, c, run_id, d: s.run_segment(run_id, "worker"),
    "expiry": lambda s, c, run_id, d: _expire(s, c),
    "cancel": lambda s, c, run_id, d: _quietly(lambda: s.cancel(run_id, by=OPS)),
    "quorum approval": lambda s, c, run_id, d: attempt(s, run_id, approve(d), BOB),
    "deny": lambda s, c, run_id, d: attempt(s, run_id, deny(d), CAROL),
}


def _expire(service: Service, clock: FakeClock) -> None:
    clock.advance(seconds=11)
    service.expire_approvals()


def _quietly(action: Callable[[], object]) -> None:
    with suppress(ConflictError):
        action()


ACTORS: dict[str, tuple[Principal, Callable[[str], DecisionBody]]] = {
    "the requester approves": (MALLORY, approve),
    "a principal with no role approves": (DAVE, approve),
    "a treasurer approves": (ALICE, approve),
    "a treasurer approves in other words": (ALICE, lambda d: approve(d, reason="checked")),
    "a treasurer edits to the same arguments": (
        ALICE,
        lambda d: approve(
            d, calls={"t1": CallDecisionBody(decision="edit", arguments={"amount": 5000})}
        ),
    ),
    "a treasurer denies": (ALICE, deny),
}


@contextmanager
def before_statement(k: int, action: Callable[[], object]) -> Iterator[list[threading.Thread]]:
    """Start ``action`` in a thread right before the calling thread's ``k``-th statement
    (0: its first), and give it a second to finish: one that waits on a lock the caller
    holds finishes once the caller lets go. The started thread is yielded, to join."""
    actor, sent = threading.get_ident(), [0]
    started: list[threading.Thread] = []

    def boundary() -> None:
        if threading.get_ident() != actor:
            return
        if sent[0] == k and not started:
            thread = threading.Thread(target=action)
            started.append(thread)
            thread.start()
            thread.join(1.0)
        sent[0] += 1

    def on_cursor(*args: Any) -> None:
        boundary()

    # every engine: the store's PostgreSQL statements in autocommit go through one of
    # their own
    event.listen(Engine, "before_cursor_execute", on_cursor)
    try:
        yield started
    finally:
        event.remove(Engine, "before_cursor_execute", on_cursor)


def assert_only_authorised(service: Service, run_id: str, digest: str) -> None:
    """No decision without a principal who may decide this turn; no release by fewer
    distinct authorised approvals of its effect than the quorum."""
    decisions = service.store.decisions
    approvals = decisions.approvals(run_id, digest)
    assert {a.principal for a in approvals} <= AUTHORISED, approvals
    decided = decisions.decision_for(run_id, digest)
    if decided is None:
        run = service.store.runs.require(run_id)
        assert run.status in (RunStatus.QUEUED, RunStatus.WAITING_FOR_APPROVAL) or (
            run.status is RunStatus.CANCELLED
        ), run.status
        return
    if decided.decision["decision"] == "deny" and not decided.decision.get("calls"):
        assert decided.approver in AUTHORISED | {"airlock"}, decided
        return
    assert decided.approver in AUTHORISED, decided
    (won,) = [a for a in approvals if a.principal == decided.approver]
    same = {a.principal for a in approvals if a.proposal == won.proposal}
    assert len(same) >= QUORUM and same <= AUTHORISED, approvals


@pytest.mark.parametrize("competitor", list(COMPETITORS))
@pytest.mark.parametrize("actor", list(ACTORS))
def test_no_decision_without_authority_at_any_statement_boundary(
    engine: Engine, actor: str, competitor: str
) -> None:
    who, body_of = ACTORS[actor]
    compete = COMPETITORS[competitor]
    fired = 0
    for k in range(8):
        clock = FakeClock()
        service = make_service(engine, clock)
        run, _ = service.start_run("treasury", "pay the supplier", requested_by="mallory")
        digest = first_digest(run.id)
        if competitor != "suspension":
            assert service.run_segment(run.id, "worker").outcome is Outcome.SUSPENDED
            if competitor == "deny" or actor.endswith("edits to the same arguments"):
                # a treasurer approved already: the actor's approval may make the quorum
                assert attempt(service, run.id, approve(digest), CAROL) == "partial"
        race = functools.partial(compete, service, clock, run.id, digest)
        with before_statement(k, race) as started:
            result = attempt(service, run.id, body_of(digest), who)
        for thread in started:
            thread.join(30)
            assert not thread.is_alive()
        fired += bool(started)
        if not started:  # the actor sent fewer statements: the competitor comes after
            compete(service, clock, run.id, digest)
        assert service.store.runs.require(run.id).turn_digest == digest  # as predicted
        assert_only_authorised(service, run.id, digest)
        if who.id not in AUTHORISED:
            assert result in ("forbidden", "conflict"), (k, result)
    assert fired >= 1  # the hook did fire before the actor's statements


def test_a_decision_for_a_turn_that_is_not_waiting_yet_is_refused_and_stores_nothing(
    engine: Engine,
) -> None:
    """Defect 1 as reported: the requester, alone, quotes the digest of the turn the
    run is about to suspend on. The run suspends right after her read; the write of
    the unfixed code then matched its guard (status, digest, expiry: not who decides)
    and released a quorum-2 transfer."""
    clock = FakeClock()
    service = make_service(engine, clock)
    run, _ = service.start_run("treasury", "pay the supplier", requested_by="mallory")
    digest = first_digest(run.id)
    get = service.store.runs.get

    def suspended_after_the_read(run_id: str) -> Any:
        read = get(run_id)
        assert service.run_segment(run_id, "worker").outcome is Outcome.SUSPENDED
        return read

    service.store.runs.get = suspended_after_the_read  # type: ignore[method-assign]
    # authorised before any answer, on the turn its digest names: she may not decide it
    with pytest.raises(ForbiddenError, match="requested this run"):
        service.record_decision(run.id, approve(digest), MALLORY)
    service.store.runs.get = get  # type: ignore[method-assign]
    waiting = service.store.runs.require(run.id)
    assert (waiting.status, waiting.turn_digest) == (RunStatus.WAITING_FOR_APPROVAL, digest)
    assert service.store.decisions.decision_for(run.id, digest) is None
    assert service.store.decisions.approvals(run.id, digest) == []
    # now that it waits, the same request is decided on its authority: 403
    with pytest.raises(ForbiddenError, match="requested this run"):
        service.record_decision(run.id, approve(digest), MALLORY)


# -- an inbox sign-in is re-checked by the decision's write (found in review) --------------


@pytest.mark.parametrize("ended", [False, True])
def test_a_sign_out_waits_for_a_decision_made_under_it_or_refuses_it(
    engine: Engine, ended: bool
) -> None:
    """The sign-in a decision is made under is read again in the decision's transaction
    and held to its commit: a sign-out that comes while the decision is written waits
    for it; one that came before refuses it."""
    clock = FakeClock()
    service = make_service(engine, clock)
    run, _ = service.start_run("treasury", "pay the supplier", requested_by="mallory")
    assert service.run_segment(run.id, "worker").outcome is Outcome.SUSPENDED
    digest = first_digest(run.id)
    sessions = service.store.sessions
    sessions.open("s-1", {"id": "alice"}, "csrf", lasts=timedelta(hours=1))
    if ended:
        assert sessions.close("s-1")
        with pytest.raises(ConflictError, match="sign-in has ended"):
            service.record_decision(run.id, approve(digest), ALICE, sign_in="s-1")
        assert service.store.decisions.approvals(run.id, digest) == []
        return
    held, release = threading.Event(), threading.Event()

    def hold(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # right after the decision's read of the sign-in, its transaction open
        reads = statement.lstrip().upper().startswith("SELECT")
        if reads and "inbox_sessions" in statement and not held.is_set():
            held.set()
            assert release.wait(10)

    event.listen(Engine, "after_cursor_execute", hold)
    try:
        with ThreadPoolExecutor(2) as pool:
            decided = pool.submit(
                service.record_decision, run.id, approve(digest), ALICE, sign_in="s-1"
            )
            assert held.wait(10)
            signed_out = pool.submit(sessions.close, "s-1")
            done, _ = wait([signed_out], timeout=0.5)
            assert not done  # the sign-out waits on the row the decision holds
            release.set()
            assert decided.result().result == "partial"
            assert signed_out.result()
    finally:
        release.set()
        event.remove(Engine, "after_cursor_execute", hold)
    assert [a.principal for a in service.store.decisions.approvals(run.id, digest)] == ["alice"]


def test_a_repeat_of_a_decision_while_its_run_finishes_is_told_it_was_decided(
    engine: Engine,
) -> None:
    """An authorised repeat reads the run decided, with its checkpoint; the resumed run
    finishes (its checkpoint cleared) before that checkpoint is read back. The turn is
    then read from its audit: 200 duplicate, not a refusal for a checkpoint that went."""
    clock = FakeClock()
    service = make_service(engine, clock)
    run, _ = service.start_run("treasury", "pay the supplier", requested_by="mallory")
    assert service.run_segment(run.id, "worker").outcome is Outcome.SUSPENDED
    digest = service.store.runs.require(run.id).turn_digest or ""
    assert attempt(service, run.id, approve(digest), ALICE) == "partial"
    assert attempt(service, run.id, approve(digest), BOB) == "recorded"
    get = service.store.runs.get

    def finished_after_the_read(run_id: str) -> Any:
        read = get(run_id)
        assert service.run_segment(run_id, "worker").outcome is Outcome.COMPLETED
        return read

    service.store.runs.get = finished_after_the_read  # type: ignore[method-assign]
    assert attempt(service, run.id, approve(digest), CAROL) == "duplicate"
    service.store.runs.get = get  # type: ignore[method-assign]
    assert service.store.runs.require(run.id).status is RunStatus.COMPLETED
