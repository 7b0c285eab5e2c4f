"""Regression tests of the gate's defects (issue 13), on both databases unless marked.

Each reproduces a defect found on the earlier code; races are forced at the
statement boundary (a hook runs the competing statement there), never slept for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest
from pydantic import JsonValue
from sqlalchemy import Engine, event

from airlock.loop import (
    Agent,
    Approve,
    Ask,
    DecisionError,
    Deny,
    Effect,
    ModelResponse,
    RequiresApproval,
    ScriptedModel,
    Tool,
    ToolContext,
    tool,
)
from airlock.loop.messages import AssistantMessage, JsonObject, Message, ToolCall, Usage
from airlock.loop.tools import ToolSchema
from airlock.persistence.crypto import StateCipher
from airlock.persistence.db import make_engine
from airlock.persistence.domain import CallStatus, RunStatus
from airlock.persistence.store import RunStore
from airlock.workers.service import ConflictError, Limits, Outcome, Service
from airlock.workers.service.decisions import CallDecisionBody, DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from airlock.workers.service.views import run_view
from tests.conftest import FakeClock

OPERATOR = Principal.trusted("test")


class Wipe(Tool, RequiresApproval):
    name = "wipe"
    description = "Delete every row of a table."

    def __init__(self, ran: list[str]) -> None:
        self.ran = ran

    def invoke(self, arguments: JsonObject, ctx: ToolContext) -> JsonValue:
        self.ran.append(f"wipe {ctx.call_id}")
        return "wiped"


def gated_tools(ran: list[str]) -> list[Tool]:
    @tool(effect=Effect.WRITE)
    def send_email(to: str, ctx: ToolContext) -> str:
        ran.append(f"send_email {ctx.call_id}")
        return f"sent to {to}"

    return [send_email, Wipe(ran)]


def deny_wipe(tool: Tool, arguments: JsonObject) -> Approve | Deny | Ask:
    return Deny(reason="never wipe") if tool.name == "wipe" else Ask()


def service_for(
    engine: Engine, *agents: Agent, clock: FakeClock | None = None, key: str | None = None
) -> Service:
    cipher = StateCipher(key)
    repo = (
        RunStore(engine, clock=clock, cipher=cipher) if clock else RunStore(engine, cipher=cipher)
    )
    woken: list[str] = []
    kwargs = {"clock": clock} if clock else {}
    return Service(
        store=repo,
        registry=Registry(agents),
        enqueue=lambda run_id, delay=None: woken.append(run_id),
        limits=Limits(retry_base_delay=0.01),
        **kwargs,  # type: ignore[arg-type]
    )


def policy_agent(ran: list[str]) -> Agent:
    steps: list[dict[str, JsonValue]] = [
        {
            "tool_calls": [
                {"id": "mail", "name": "send_email", "arguments": {"to": "a@x"}},
                {"id": "wipe", "name": "wipe", "arguments": {"table": "users"}},
            ]
        },
        {"content": "done"},
    ]
    return Agent(
        name="policed",
        model=ScriptedModel(steps),
        tools=gated_tools(ran),
        approval_policy=deny_wipe,
    )


def waiting(service: Service, agent: str) -> tuple[str, str]:
    run, _ = service.start_run(agent, "go")
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    digest = service.store.runs.require(run.id).turn_digest
    assert digest is not None
    return run.id, digest


# -- 1. a policy's Deny is final ------------------------------------------------------------


def test_a_turn_level_approve_does_not_override_the_policys_deny(engine: Engine) -> None:
    ran: list[str] = []
    service = service_for(engine, policy_agent(ran))
    run_id, digest = waiting(service, "policed")
    view = run_view(service, service.store.runs.require(run_id))
    pending = view["pending"]
    assert isinstance(pending, dict) and isinstance(pending["calls"], list)
    verdicts = {c["id"]: (c["verdict"], c["policy_reason"]) for c in pending["calls"]}  # type: ignore[call-overload,index]
    assert verdicts == {"mail": ("asks", None), "wipe": ("denied_by_policy", "never wipe")}

    service.record_decision(run_id, DecisionBody(turn_digest=digest, decision="approve"), OPERATOR)
    assert service.run_segment(run_id, "w").outcome is Outcome.COMPLETED
    assert ran == ["send_email mail"]
    decided = [e.payload for e in service.store.events.read(run_id) if e.kind == "decision"]
    wipe = [(p["decision"], p["source"]) for p in decided if p.get("call_id") == "wipe"]
    assert wipe == [("deny", "policy")]


def test_a_decision_naming_a_call_the_policy_decided_is_refused(engine: Engine) -> None:
    ran: list[str] = []
    service = service_for(engine, policy_agent(ran))
    run_id, digest = waiting(service, "policed")
    body = DecisionBody(
        turn_digest=digest,
        decision="deny",
        calls={"wipe": CallDecisionBody(decision="approve")},
    )
    with pytest.raises(DecisionError, match="decided by the approval policy"):
        service.record_decision(run_id, body, OPERATOR)
    assert service.store.runs.require(run_id).status is RunStatus.WAITING_FOR_APPROVAL
    assert service.store.decisions.decision_for(run_id, digest) is None
    # naming only the asked call: the policy's deny still stands for the other
    only_mail = DecisionBody(
        turn_digest=digest, decision="approve", calls={"mail": CallDecisionBody(decision="approve")}
    )
    service.record_decision(run_id, only_mail, OPERATOR)
    assert service.run_segment(run_id, "w").outcome is Outcome.COMPLETED
    assert ran == ["send_email mail"]


# -- 2. write-ahead: an approved write never runs twice after a worker loss -----------------


class WorkerLostError(BaseException):
    """Stands for the worker's death: nothing of the segment after it runs."""


class FreshIds:
    """Like a real provider: every call gets an id never seen before, so a repeated model
    call would ask for the write again under a new id. ``crash_on`` model calls raise."""

    def __init__(self, steps: list[dict[str, JsonValue]], crash_on: int | None = None) -> None:
        self._steps = steps
        self._crash_on = crash_on
        self.calls = 0

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        self.calls += 1
        if self.calls == self._crash_on:
            raise WorkerLostError
        turn = sum(1 for m in transcript if isinstance(m, AssistantMessage))
        step = self._steps[turn]
        raw = step.get("tool_calls") or []
        assert isinstance(raw, list)
        calls = tuple(
            ToolCall(f"fresh-{self.calls}-{i}", str(c["name"]), dict(c["arguments"]))  # type: ignore[index,call-overload,arg-type]
            for i, c in enumerate(raw)
        )
        content = step.get("content")
        return ModelResponse(
            AssistantMessage(content=str(content) if content else None, tool_calls=calls),
            Usage(1, 1),
        )


def approving_writer(model: FreshIds, ran: list[str], *, crash_in_tool: bool) -> Agent:
    @tool(effect=Effect.WRITE)
    def send_email(to: str, ctx: ToolContext) -> str:
        ran.append(f"send_email {ctx.call_id}")
        if crash_in_tool:
            raise WorkerLostError  # the side effect happened; its result is never recorded
        return f"sent to {to}"

    return Agent(
        name="writer",
        model=model,
        tools=[send_email],
        approval_policy=lambda tool, arguments: Approve(),
    )


WRITE_THEN_ANSWER: list[dict[str, JsonValue]] = [
    {"tool_calls": [{"name": "send_email", "arguments": {"to": "a@x"}}]},
    {"content": "done"},
]


def lose_the_worker(service: Service, clock: FakeClock, run_id: str) -> None:
    with pytest.raises(WorkerLostError):
        service.run_segment(run_id, "doomed")
    clock.advance(seconds=service.limits.lease.total_seconds() + 1)
    assert service.sweep().reclaimed.requeued == (run_id,)


def test_a_worker_lost_right_after_a_policy_approved_write_is_in_doubt_not_repeated(
    engine: Engine, clock: FakeClock
) -> None:
    ran: list[str] = []
    model = FreshIds(WRITE_THEN_ANSWER)
    service = service_for(engine, approving_writer(model, ran, crash_in_tool=True), clock=clock)
    run, _ = service.start_run("writer", "go")
    lose_the_worker(service, clock, run.id)
    assert service.run_segment(run.id, "next").outcome is Outcome.FAILED
    assert ran == ["send_email fresh-1-0"]  # once: the model was not asked again
    assert model.calls == 1
    failed = service.store.runs.require(run.id)
    assert "never recorded" in (failed.error or "") and "fresh-1-0" in (failed.error or "")
    assert [e.status for e in service.store.ledger.entries(run.id)] == [CallStatus.STARTED]


def test_a_worker_lost_after_a_recorded_write_replays_it_and_completes(
    engine: Engine, clock: FakeClock
) -> None:
    ran: list[str] = []
    model = FreshIds(WRITE_THEN_ANSWER, crash_on=2)  # dies on the model call after the write
    service = service_for(engine, approving_writer(model, ran, crash_in_tool=False), clock=clock)
    run, _ = service.start_run("writer", "go")
    lose_the_worker(service, clock, run.id)
    assert service.run_segment(run.id, "next").outcome is Outcome.COMPLETED
    assert ran == ["send_email fresh-1-0"]
    assert model.calls == 3  # the write's turn was not asked for again; the answer was
    assert service.store.runs.require(run.id).output == "done"


def test_a_write_after_a_resumed_turn_is_written_ahead_too(
    engine: Engine, clock: FakeClock
) -> None:
    """A human-approved turn, then a policy-approved write; the worker dies in it."""
    ran: list[str] = []
    steps: list[dict[str, JsonValue]] = [
        {"tool_calls": [{"name": "wipe", "arguments": {"table": "t"}}]},
        *WRITE_THEN_ANSWER,
    ]
    model = FreshIds(steps)

    @tool(effect=Effect.WRITE)
    def send_email(to: str, ctx: ToolContext) -> str:
        ran.append(f"send_email {ctx.call_id}")
        raise WorkerLostError

    agent = Agent(
        name="mixed",
        model=model,
        tools=[send_email, Wipe(ran)],
        approval_policy=lambda tool, arguments: Approve() if tool.name == "send_email" else Ask(),
    )
    service = service_for(engine, agent, clock=clock)
    run_id, digest = waiting(service, "mixed")
    service.record_decision(run_id, DecisionBody(turn_digest=digest, decision="approve"), OPERATOR)
    lose_the_worker(service, clock, run_id)
    assert service.run_segment(run_id, "next").outcome is Outcome.FAILED
    assert ran == ["wipe fresh-1-0", "send_email fresh-2-0"]


# -- 9. the digest binds the run ---------------------------------------------------------


def test_an_approval_for_one_run_cannot_release_another_runs_equal_turn(engine: Engine) -> None:
    ran: list[str] = []
    service = service_for(engine, policy_agent(ran))
    _, digest_x = waiting(service, "policed")
    y, digest_y = waiting(service, "policed")
    assert digest_x != digest_y  # same calls, same ids: the run id tells them apart
    with pytest.raises(ConflictError, match="not the digest"):
        service.record_decision(y, DecisionBody(turn_digest=digest_x, decision="approve"), OPERATOR)
    assert service.store.runs.require(y).status is RunStatus.WAITING_FOR_APPROVAL


# -- 3. expiry is guarded on the run still waiting, expired, in its own statement -----------


def expiring(engine: Engine, clock: FakeClock, action: str) -> tuple[Service, str, str]:
    from airlock.loop import ExpiryAction

    agent = Agent(
        name="expiring",
        model=ScriptedModel(WRITE_THEN_ANSWER),
        tools=gated_tools([]),
        approval_ttl=timedelta(seconds=10),
        on_expiry=ExpiryAction(action),
    )
    service = service_for(engine, agent, clock=clock)
    run_id, digest = waiting(service, "expiring")
    return service, run_id, digest


@pytest.mark.parametrize("action", ["cancel", "deny"])
def test_expiry_does_not_undo_an_approval_that_won_just_before_it(
    engine: Engine, clock: FakeClock, action: str
) -> None:
    service, run_id, digest = expiring(engine, clock, action)
    clock.advance(seconds=11)
    select_expired = service.store.queries.expired_approvals

    def approval_lands_after_the_select(limit: int = 500) -> list[str]:
        due = select_expired(limit)
        assert due == [run_id]
        # between the sweeper's SELECT and its action, an approval made just before
        # the deadline (by a process whose clock says so) commits: 202
        clock.advance(seconds=-2)
        body = DecisionBody(turn_digest=digest, decision="approve")
        assert service.record_decision(run_id, body, OPERATOR).result == "recorded"
        clock.advance(seconds=2)
        return due

    service.store.queries.expired_approvals = approval_lands_after_the_select  # type: ignore[method-assign]
    assert service.expire_approvals() == ()
    run = service.store.runs.require(run_id)
    assert run.status is RunStatus.QUEUED
    assert "expired" not in [e.kind for e in service.store.events.read(run_id)]
    assert service.store.decisions.decision_for(run_id, digest) is not None


def test_a_decision_after_expires_at_is_refused_as_expired(
    engine: Engine, clock: FakeClock
) -> None:
    service, run_id, digest = expiring(engine, clock, "cancel")
    clock.advance(seconds=11)  # due, but the sweeper has not run yet
    with pytest.raises(ConflictError, match="expired") as info:
        service.record_decision(
            run_id, DecisionBody(turn_digest=digest, decision="approve"), OPERATOR
        )
    assert info.value.expired
    assert service.store.runs.require(run_id).status is RunStatus.WAITING_FOR_APPROVAL
    assert service.expire_approvals() == (run_id,)
    assert service.store.runs.require(run_id).status is RunStatus.CANCELLED


# -- 8 and 11: purge and reclaim, raced at their statement boundary (PostgreSQL) ------------


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.mark.postgres
def test_purge_racing_a_retry_keeps_the_live_runs_ledger_and_events(
    pg_engine: Engine, clock: FakeClock
) -> None:
    ran: list[str] = []
    service = service_for(pg_engine, policy_agent(ran), clock=clock)
    run_id, digest = waiting(service, "policed")
    service.record_decision(run_id, DecisionBody(turn_digest=digest, decision="approve"), OPERATOR)
    service.store.transitions.claim(run_id, "w", service.limits.lease)
    service.store.transitions.finish(run_id, RunStatus.FAILED, owner="w", error="crashed")
    clock.advance(days=31)
    before = len(service.store.events.read(run_id))
    retried: list[bool] = []

    def retry_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE") and not retried:
            retried.append(True)  # the retry commits on its own connection, now
            service.retry(run_id, by=Principal.trusted("racer"))

    event.listen(pg_engine, "before_cursor_execute", retry_first)
    try:
        assert service.purge(timedelta(days=30)) == 0
    finally:
        event.remove(pg_engine, "before_cursor_execute", retry_first)
    assert retried
    assert service.store.runs.require(run_id).status is RunStatus.QUEUED
    assert len(service.store.events.read(run_id)) == before + 1  # the retry's own event
    assert service.store.decisions.decision_for(run_id, digest) is not None


@pytest.mark.postgres
def test_the_sweeper_does_not_reclaim_a_lease_renewed_after_its_select(
    pg_engine: Engine, clock: FakeClock
) -> None:
    service = service_for(pg_engine, policy_agent([]), clock=clock)
    run, _ = service.start_run("policed", "go")
    lease = service.limits.lease
    assert service.store.transitions.claim(run.id, "alive", lease) is not None
    clock.advance(seconds=lease.total_seconds() + 1)
    transition = service.store.transitions.move

    def renewal_lands_first(*args: Any, **kwargs: Any) -> bool:
        # between the sweeper's SELECT and its UPDATE, the live worker renews
        assert service.store.transitions.renew_lease(run.id, "alive", lease)
        return transition(*args, **kwargs)

    service.store.transitions.move = renewal_lands_first  # type: ignore[method-assign]
    reclaimed = service.store.transitions.reclaim_expired_leases(max_attempts=1)
    assert reclaimed.requeued == () and reclaimed.failed == ()
    still = service.store.runs.require(run.id)
    assert (still.status, still.lease_owner) == (RunStatus.RUNNING, "alive")


# -- 6. NUL and lone surrogates from tools and models are stored losslessly ---------------


def test_nul_and_surrogates_in_a_writes_result_and_the_answer_are_kept(engine: Engine) -> None:
    @tool(effect=Effect.WRITE)
    def send_email(to: str) -> str:
        return "sent\x00 \ud800"

    steps: list[dict[str, JsonValue]] = [
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "a\x00"}}]},
        {"content": "done\x00 \udfff"},
    ]
    agent = Agent(
        name="nul",
        model=ScriptedModel(steps),
        tools=[send_email],
        approval_policy=lambda tool, arguments: Approve(),
    )
    service = service_for(engine, agent)
    run, _ = service.start_run("nul", "in\x00put")
    assert service.run_segment(run.id, "w").outcome is Outcome.COMPLETED
    done = service.store.runs.require(run.id)
    assert (done.input, done.output) == ("in\x00put", "done\x00 \udfff")
    [entry] = service.store.ledger.entries(run.id)
    assert (entry.status, entry.result) == (CallStatus.SUCCEEDED, "sent\x00 \ud800")
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert kinds[-1] == "completed" and "tool" in kinds


# -- 5. with a key, everything holding prompt or tool data is sealed at rest ------------------


def raw_text(engine: Engine) -> str:
    """Every stored value of every table, as text: what someone reading the database sees."""
    from sqlalchemy import MetaData, select

    tables = MetaData()
    tables.reflect(engine)
    with engine.connect() as conn:
        rows = [
            str(tuple(row))
            for table in tables.sorted_tables
            for row in conn.execute(select(table)).all()
        ]
    return "\n".join(rows)


def test_with_a_key_no_prompt_or_tool_data_is_stored_in_clear(engine: Engine) -> None:
    from cryptography.fernet import Fernet

    @tool
    def lookup(q: str) -> str:
        return "LOOKED-UP-SECRET"

    @tool(effect=Effect.WRITE)
    def send_email(to: str, body: str) -> str:
        return f"SENT-SECRET to {to}"

    steps: list[dict[str, JsonValue]] = [
        {"tool_calls": [{"name": "lookup", "arguments": {"q": "QUERY-SECRET"}}]},
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "TO-SECRET", "body": "b"}}]},
        {"content": "ANSWER-SECRET"},
    ]
    agent = Agent(name="sealed", model=ScriptedModel(steps), tools=[lookup, send_email])
    key = Fernet.generate_key().decode()
    service = service_for(engine, agent, key=key)
    run, _ = service.start_run("sealed", "INPUT-SECRET")
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    digest = service.store.runs.require(run.id).turn_digest or ""
    [call] = service.store.runs.load_state(service.store.runs.require(run.id)).pending_calls
    edit = CallDecisionBody(decision="edit", arguments={"to": "EDITED-SECRET", "body": "b"})
    body = DecisionBody(turn_digest=digest, decision="approve", calls={call.id: edit})
    service.record_decision(run.id, body, OPERATOR)
    assert service.run_segment(run.id, "w").outcome is Outcome.COMPLETED

    stored = raw_text(engine)
    for secret in ("INPUT", "QUERY", "LOOKED-UP", "TO", "EDITED", "SENT", "ANSWER"):
        assert f"{secret}-SECRET" not in stored, secret
    # the authorised reader, holding the key, reads everything back
    done = service.store.runs.require(run.id)
    assert (done.input, done.output) == ("INPUT-SECRET", "ANSWER-SECRET")
    assert [e.result for e in service.store.ledger.entries(run.id)] == [
        "LOOKED-UP-SECRET",
        "SENT-SECRET to EDITED-SECRET",
    ]
    events = json.dumps([e.payload for e in service.store.events.read(run.id)])
    assert "QUERY-SECRET" in events and "EDITED-SECRET" in events


def test_a_run_sealed_with_a_dropped_key_is_reported_on_its_own(engine: Engine) -> None:
    from cryptography.fernet import Fernet

    from airlock.persistence.crypto import StateCipher

    ran: list[str] = []
    old = RunStore(engine, cipher=StateCipher(Fernet.generate_key().decode()))
    sealed, _ = old.runs.create("policed", "old input", first_event=("request", {"input": "x"}))
    failed = old.transitions.finish(
        sealed.id, RunStatus.FAILED, expected=[RunStatus.QUEUED], error="old error"
    )
    assert failed
    service = service_for(engine, policy_agent(ran), key=Fernet.generate_key().decode())
    fine, _ = service.start_run("policed", "new input")
    page = service.store.queries.list_runs()
    assert {r.id for r in page.runs} == {sealed.id, fine.id}
    unreadable = service.store.runs.require(sealed.id)
    assert unreadable.unreadable is not None and "another key" in unreadable.unreadable
    assert run_view(service, unreadable)["error"] == unreadable.unreadable
    [event] = service.store.events.read(sealed.id)
    assert "cannot be decrypted" in str(event.payload["unreadable"])
    assert service.store.runs.require(fine.id).input == "new input"
    # retried, the sealed run fails with that reason instead of running on an empty input
    service.retry(sealed.id, by=OPERATOR)
    assert service.run_segment(sealed.id, "w").outcome is Outcome.FAILED
    assert "cannot be decrypted" in (service.store.runs.require(sealed.id).error or "")
    assert ran == []


def test_without_a_key_values_that_look_sealed_round_trip(engine: Engine) -> None:
    @tool(effect=Effect.WRITE)
    def store(value: str, extra: dict[str, str]) -> str:
        return "fernet:not-a-token"

    looks_sealed: dict[str, JsonValue] = {"value": "plain:x", "extra": {"$sealed": "fernet:x"}}
    steps: list[dict[str, JsonValue]] = [
        {"tool_calls": [{"name": "store", "arguments": looks_sealed}]},
        {"content": "plain:fernet:answer"},
    ]
    agent = Agent(
        name="lookalike",
        model=ScriptedModel(steps),
        tools=[store],
        approval_policy=lambda tool, arguments: Approve(),
    )
    service = service_for(engine, agent)
    run, _ = service.start_run("lookalike", "fernet:input")
    assert service.run_segment(run.id, "w").outcome is Outcome.COMPLETED
    done = service.store.runs.require(run.id)
    assert (done.input, done.output, done.unreadable) == (
        "fernet:input", "plain:fernet:answer", None,
    )  # fmt: skip
    assert [e.result for e in service.store.ledger.entries(run.id)] == ["fernet:not-a-token"]
    [call_event] = [e for e in service.store.events.read(run.id) if e.kind == "tool"]
    assert call_event.payload["arguments"] == looks_sealed


# -- also: the ledger's start of an acting call is guarded by the lease -----------------------


def test_a_segment_taken_over_after_its_write_ahead_starts_no_call(
    engine: Engine, clock: FakeClock
) -> None:
    """Between the write-ahead checkpoint and the start of the write, the run's lease
    expires, the sweeper requeues it and another worker claims it: the first segment
    must not start the write (on the earlier code it did, beside the new owner)."""
    ran: list[str] = []
    model = FreshIds(WRITE_THEN_ANSWER)
    service = service_for(engine, approving_writer(model, ran, crash_in_tool=False), clock=clock)
    run, _ = service.start_run("writer", "go")
    checkpoint = service.store.transitions.checkpoint

    def taken_over_right_after(*args: Any, **kwargs: Any) -> bool:
        written = checkpoint(*args, **kwargs)
        clock.advance(seconds=service.limits.lease.total_seconds() + 1)
        assert service.sweep().reclaimed.requeued == (run.id,)
        assert (
            service.store.transitions.claim(run.id, "new-owner", service.limits.lease) is not None
        )
        return written

    service.store.transitions.checkpoint = taken_over_right_after  # type: ignore[method-assign]
    assert service.run_segment(run.id, "stalled").outcome is Outcome.LEASE_LOST
    assert ran == []
    assert service.store.ledger.entries(run.id) == []
    still = service.store.runs.require(run.id)
    assert (still.status, still.lease_owner) == (RunStatus.RUNNING, "new-owner")


def test_start_call_under_a_lease_it_does_not_hold_records_nothing(engine: Engine) -> None:
    from airlock.persistence.store import LeaseLostError

    repo = RunStore(engine)
    run, _ = repo.runs.create("a", "go")
    assert repo.transitions.claim(run.id, "owner", timedelta(seconds=60)) is not None
    with pytest.raises(LeaseLostError):
        repo.ledger.start_call(run.id, "c1", "send_email", "write", {"to": "x"}, owner="intruder")
    assert repo.ledger.entries(run.id) == []
    entry, fresh = repo.ledger.start_call(
        run.id, "c1", "send_email", "write", {"to": "x"}, owner="owner"
    )
    assert fresh and entry.status is CallStatus.STARTED
    # the same start again by its segment (its first answer was lost): still its own to run
    again, fresh = repo.ledger.start_call(
        run.id, "c1", "send_email", "write", {"to": "x"}, owner="owner"
    )
    assert fresh and again.status is CallStatus.STARTED and again.started_by == "owner"
    # a segment that took the run over finds it in the ledger: what it holds, in doubt
    assert repo.transitions.claim(run.id, "next", timedelta(seconds=60), take_over="owner")
    held, fresh = repo.ledger.start_call(
        run.id, "c1", "send_email", "write", {"to": "x"}, owner="next"
    )
    assert not fresh and held.status is CallStatus.STARTED and held.started_by == "owner"
