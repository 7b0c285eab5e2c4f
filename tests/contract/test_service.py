"""The service's use cases in-process, on both databases (the broker hop is recorded)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from pydantic import JsonValue
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from airlock.loop import (
    Agent,
    Approve,
    Effect,
    Model,
    ModelError,
    ModelResponse,
    ScriptedModel,
    ToolContext,
    ToolInvocation,
    ToolOutcome,
    tool,
)
from airlock.loop.events import ModelCalled
from airlock.loop.messages import Message, Usage
from airlock.loop.tools import ToolSchema
from airlock.persistence.domain import CallStatus, RunStatus
from airlock.persistence.store import RunStore, utcnow
from airlock.workers.service import ConflictError, Limits, Outcome, SegmentInterruptedError, Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.events import Pending, RunEventSink
from airlock.workers.service.keeper import Keeper
from airlock.workers.service.ledger import LedgerExecutor
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from tests.conftest import FakeClock
from tests.contract.helpers import sent_to_postgres
from tests.integration.agents import AGENTS, lookup, send_email, w1

OPERATOR = Principal.trusted("test")


class FlakyModel:
    """Fails with the given errors first, then plays the script."""

    def __init__(self, errors: list[ModelError]) -> None:
        self.errors = errors
        self.script = ScriptedModel(w1())

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        if self.errors:
            raise self.errors.pop(0)
        return self.script.complete(transcript, tools)


class Woken(list[tuple[str, float | None]]):
    def __call__(self, run_id: str, delay: float | None = None) -> None:
        self.append((run_id, delay))


def make_service(engine: Engine, *extra: Agent, max_attempts: int = 3) -> tuple[Service, Woken]:
    woken = Woken()
    service = Service(
        store=RunStore(engine),
        registry=Registry([*AGENTS, *extra]),
        enqueue=woken,
        limits=Limits(max_attempts=max_attempts, retry_base_delay=0.01),
    )
    return service, woken


def flaky(name: str, *errors: ModelError) -> Agent:
    return Agent(name=name, model=FlakyModel(list(errors)), tools=[lookup, send_email])


class Ticks:
    """A keeper's clock that the test moves: no thread, no sleep."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def keeping(
    repo: RunStore,
    agent: Agent,
    delay: float = 0.05,
    *,
    limits: Limits | None = None,
    clock: FakeClock | None = None,
) -> Service:
    """A service for ``agent`` whose keeper writes held events after ``delay``; the test
    steps it (``let_time_pass``)."""
    limits = limits or Limits(events_delay=delay)
    keeper = Keeper(repo, limits.lease, limits.events_delay, clock=Ticks(), sleep=None)
    return Service(
        store=repo,
        registry=Registry([agent]),
        enqueue=Woken(),
        limits=limits,
        keeper=keeper,
        clock=clock or utcnow,
    )


def let_time_pass(service: Service, seconds: float) -> None:
    """``seconds`` pass for the keeper, which then looks, as its thread would."""
    assert service.keeper is not None and isinstance(service.keeper.clock, Ticks)
    service.keeper.clock.now += seconds
    service.keeper.tick()


class BeforeSecondCall:
    """The script's model, which does ``act`` first when it is called the second time
    (``act`` may raise: the call fails)."""

    def __init__(self, script: Model, act: Callable[[], None]) -> None:
        self._script = script
        self._act = act
        self._calls = 0

    def complete(self, transcript: Sequence[Message], tools: Sequence[ToolSchema]) -> ModelResponse:
        self._calls += 1
        if self._calls == 2:
            self._act()
        return self._script.complete(transcript, tools)


def peek_then_poke(model: Model, on_poke: Callable[[], None]) -> Agent:
    """An agent with a read (``peek``) and an idempotent write (``poke``, approved by
    its policy, calling ``on_poke`` when it runs)."""

    @tool
    def peek() -> str:
        return "ok"

    @tool(effect=Effect.IDEMPOTENT_WRITE)
    def poke() -> str:
        on_poke()
        return "ok"

    return Agent(
        name="watched",
        model=model,
        tools=[peek, poke],
        approval_policy=lambda tool, arguments: Approve(),
    )


def test_transient_model_errors_are_retried_with_the_providers_delay(engine: Engine) -> None:
    agent = flaky("flaky", ModelError("429", retryable=True, retry_after=5.0))
    service, woken = make_service(engine, agent)
    run, _ = service.start_run("flaky", "x")
    result = service.run_segment(run.id, "w")
    assert result.outcome is Outcome.RETRY and result.retry_in is not None and result.retry_in >= 5
    assert service.store.runs.require(run.id).status is RunStatus.QUEUED
    assert woken[-1] == (run.id, result.retry_in)
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    assert "retry" in [e.kind for e in service.store.events.read(run.id)]


def test_transient_errors_give_up_after_max_attempts(engine: Engine) -> None:
    errors = [ModelError("503", retryable=True) for _ in range(5)]
    service, _ = make_service(engine, flaky("down", *errors), max_attempts=2)
    run, _ = service.start_run("down", "x")
    assert service.run_segment(run.id, "w").outcome is Outcome.RETRY
    assert service.run_segment(run.id, "w").outcome is Outcome.FAILED
    failed = service.store.runs.require(run.id)
    assert failed.status is RunStatus.FAILED and "503" in (failed.error or "")


def test_non_retryable_errors_fail_the_run_with_the_message(engine: Engine) -> None:
    service, _ = make_service(engine, flaky("bad", ModelError("401: invalid api key")))
    run, _ = service.start_run("bad", "x")
    assert service.run_segment(run.id, "w").outcome is Outcome.FAILED
    assert "invalid api key" in (service.store.runs.require(run.id).error or "")
    assert [e.kind for e in service.store.events.read(run.id)][-1] == "failed"


def test_duplicate_wake_ups_are_no_ops(engine: Engine) -> None:
    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    assert service.run_segment(run.id, "w-dup").outcome is Outcome.SKIPPED
    assert service.store.runs.require(run.id).status is RunStatus.WAITING_FOR_APPROVAL


def test_tampered_state_fails_the_run_and_nothing_runs(engine: Engine) -> None:
    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    service.run_segment(run.id, "w")
    waiting = service.store.runs.require(run.id)
    service.record_decision(
        run.id, DecisionBody(turn_digest=waiting.turn_digest or "", decision="approve"), OPERATOR
    )
    with engine.begin() as conn:
        blob = conn.execute(text("select suspended_state from agent_runs")).scalar_one()
        conn.execute(
            text("update agent_runs set suspended_state = :s"),
            {"s": blob.replace("a@example.com", "evil@example.com")},
        )
    assert service.run_segment(run.id, "w").outcome is Outcome.FAILED
    failed = service.store.runs.require(run.id)
    assert "refusing to resume" in (failed.error or "") and "tampered" in (failed.error or "")
    assert [e.tool for e in service.store.ledger.entries(run.id)] == [
        "lookup"
    ]  # send_email never ran


def test_retry_continues_a_failed_run_from_its_checkpoint(engine: Engine) -> None:
    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    service.run_segment(run.id, "w")
    waiting = service.store.runs.require(run.id)
    service.record_decision(
        run.id, DecisionBody(turn_digest=waiting.turn_digest or "", decision="approve"), OPERATOR
    )
    service.store.transitions.claim(run.id, "w", service.limits.lease)
    service.store.transitions.finish(run.id, RunStatus.FAILED, owner="w", error="crashed")
    service.retry(run.id, by=OPERATOR)
    assert service.run_segment(run.id, "w2").outcome is Outcome.COMPLETED
    done = service.store.runs.require(run.id)
    assert done.output == "done" and (done.iterations, done.usage.total_tokens) == (3, 69)
    assert [e.tool for e in service.store.ledger.entries(run.id)] == ["lookup", "send_email"]


def test_expiry_cancel_and_deny(engine: Engine) -> None:
    service, _ = make_service(engine)
    deny_run, _ = service.start_run("expires_deny", "x")
    cancel_run, _ = service.start_run("expires_cancel", "x")
    for run in (deny_run, cancel_run):
        service.run_segment(run.id, "w")
    with engine.begin() as conn:
        conn.execute(text("update agent_runs set expires_at = suspended_at"))
    assert set(service.expire_approvals()) == {deny_run.id, cancel_run.id}
    assert service.store.runs.require(deny_run.id).status is RunStatus.QUEUED
    assert service.store.runs.require(cancel_run.id).status is RunStatus.CANCELLED
    assert service.expire_approvals() == ()


@pytest.mark.parametrize("body", [{"decision": "edit"}, {"decision": "approve", "arguments": {}}])
def test_edit_needs_arguments(engine: Engine, body: dict[str, Any]) -> None:
    from airlock.loop import DecisionError
    from airlock.workers.service.decisions import CallDecisionBody

    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    service.run_segment(run.id, "w")
    digest = service.store.runs.require(run.id).turn_digest or ""
    call = CallDecisionBody.model_validate(body)
    decision = DecisionBody(turn_digest=digest, decision="approve", calls={"call_1_0": call})
    if body["decision"] == "edit":
        with pytest.raises(DecisionError, match="gives no arguments"):
            service.record_decision(run.id, decision, OPERATOR)
        assert service.store.runs.require(run.id).status is RunStatus.WAITING_FOR_APPROVAL
    else:
        assert service.record_decision(run.id, decision, OPERATOR).result == "recorded"


@pytest.mark.parametrize(
    ("agent", "written"),
    [("expires_cancel", ["expired", "cancelled"]), ("expires_deny", ["expired", "decision"])],
)
def test_expiry_applies_the_action_with_its_event(
    engine: Engine, clock: FakeClock, agent: str, written: list[str]
) -> None:
    service = Service(
        store=RunStore(engine, clock=clock),
        registry=Registry(AGENTS),
        enqueue=Woken(),
        clock=clock,
    )
    run, _ = service.start_run(agent, "x")
    decided, _ = service.start_run(agent, "y")
    for r in (run, decided):
        assert service.run_segment(r.id, "w").outcome is Outcome.SUSPENDED
    digest = service.store.runs.require(decided.id).turn_digest
    assert digest is not None
    service.record_decision(
        decided.id, DecisionBody(turn_digest=digest, decision="approve"), OPERATOR
    )
    assert service.expire_approvals() == ()  # not yet due
    clock.advance(seconds=2)

    assert service.expire_approvals() == (run.id,)
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert kinds[kinds.index("suspended") + 1 :] == written
    assert "expired" not in [e.kind for e in service.store.events.read(decided.id)]
    assert service.expire_approvals() == ()  # applied once


def test_a_segments_events_are_stored_before_each_write_and_while_a_model_call_waits(
    engine: Engine,
) -> None:
    repo = RunStore(engine)
    delay = 0.05
    seen: list[tuple[str, list[str], int, int]] = []
    script = ScriptedModel(
        [
            {"tool_calls": [{"name": "peek", "arguments": {}}], "usage": {"prompt_tokens": 7}},
            {"tool_calls": [{"name": "poke", "arguments": {}}], "usage": {"prompt_tokens": 5}},
            {"content": "done", "usage": {"prompt_tokens": 3}},
        ]
    )

    def look(what: str) -> None:
        (run,) = repo.queries.list_runs().runs
        seen.append(
            (
                what,
                [e.kind for e in repo.events.read(run.id)],
                run.iterations,
                run.usage.prompt_tokens,
            )
        )

    holder: list[Service] = []

    class Slow:
        def complete(
            self, transcript: Sequence[Message], tools: Sequence[ToolSchema]
        ) -> ModelResponse:
            let_time_pass(holder[0], 4 * delay)  # a model call that takes a while
            look("model")
            return script.complete(transcript, tools)

    service = keeping(repo, peek_then_poke(Slow(), lambda: look("write")), delay)
    holder.append(service)
    run, _ = service.start_run("watched", "x")
    assert service.run_segment(run.id, "w").outcome is Outcome.COMPLETED
    assert seen == [
        ("model", ["request"], 0, 0),
        # while the model thinks, what came before is on record, counters too
        ("model", ["request", "llm", "tool"], 1, 7),
        ("write", ["request", "llm", "tool", "llm", "decision"], 2, 12),  # before a write
        ("model", ["request", "llm", "tool", "llm", "decision", "tool"], 2, 12),
    ]
    done = service.store.runs.require(run.id)
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert kinds == ["request", "llm", "tool", "llm", "decision", "tool", "llm", "completed"]
    assert (done.iterations, done.usage.prompt_tokens) == (3, 15)
    assert [(e.tool, e.result) for e in service.store.ledger.entries(run.id)] == [
        ("peek", "ok"),
        ("poke", "ok"),
    ]


def test_a_quick_segment_writes_its_events_with_its_transition(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment that ends before its events are due writes them once, with its end."""
    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    with sent_to_postgres(monkeypatch) as sent:
        assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert kinds == ["request", "llm", "tool", "llm", "suspended"]
    assert [e.tool for e in service.store.ledger.entries(run.id)] == ["lookup"]
    if engine.dialect.name == "postgresql":  # the claim, the suspension with its events and read
        assert [statement.split()[0] for statement, _ in sent] == ["UPDATE", "WITH"]


def test_an_approved_writes_resume_writes_its_events_with_the_started_record(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume: its claim (with the decision), the events before the write together
    with the write's ``started`` record, the result, the end: four statements."""
    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    service.run_segment(run.id, "w")
    waiting = service.store.runs.require(run.id)
    body = DecisionBody(turn_digest=waiting.turn_digest or "", decision="approve")
    service.record_decision(run.id, body, OPERATOR)
    with sent_to_postgres(monkeypatch) as sent:
        assert service.run_segment(run.id, "w2").outcome is Outcome.COMPLETED
    events = service.store.events.read(run.id)
    started = next(e for e in service.store.ledger.entries(run.id) if e.tool == "send_email")
    assert started.status is CallStatus.SUCCEEDED
    assert [e.kind for e in events][-4:] == ["resumed", "tool", "llm", "completed"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gap-free
    if engine.dialect.name == "postgresql":
        assert [statement.split()[0] for statement, _ in sent] == [
            "UPDATE",  # the claim, its decision with it
            "WITH",  # the events so far, and the write's started record
            "UPDATE",  # the write's result
            "WITH",  # completed, with its events
        ]
        flush = sent[1][0]
        assert "INSERT INTO run_events" in flush and "INSERT INTO tool_calls" in flush


def test_the_keeper_writes_only_events_that_have_waited(engine: Engine) -> None:
    """Events younger than the keeper's due time stay with the segment (a quick one
    writes them with its end); once they have waited, they are written."""
    repo = RunStore(engine)
    run, _ = repo.runs.create("w1", "x", first_event=("request", {}))
    assert repo.transitions.claim(run.id, "w", timedelta(seconds=30)) is not None
    ticks = Ticks()
    sink = RunEventSink(repo, run.id, "w", clock=ticks)
    sink.emit(ModelCalled(run.id, 1, Usage(3, 1), "thinking", ()))
    sink.flush(waited=60.0)
    assert [e.kind for e in repo.events.read(run.id)] == ["request"]
    ticks.now += 0.02
    sink.flush(waited=0.01)
    assert [e.kind for e in repo.events.read(run.id)] == ["request", "llm"]
    assert repo.runs.require(run.id).usage == Usage(3, 1)  # the counters with it
    assert sink.take() == Pending([], [])


def test_a_segment_longer_than_its_lease_keeps_it(engine: Engine, clock: FakeClock) -> None:
    swept: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    holder: list[Service] = []
    lease = timedelta(seconds=0.3)

    @tool
    def slow() -> str:
        for _ in range(3):  # three times the lease: only renewals keep it
            clock.advance(seconds=lease.total_seconds() / 3)
            let_time_pass(holder[0], lease.total_seconds() / 3)
        clock.advance(seconds=0.01)
        reclaimed = holder[0].store.transitions.reclaim_expired_leases(max_attempts=5)
        swept.append((reclaimed.requeued, reclaimed.failed))
        return "ok"

    model = ScriptedModel(
        [{"tool_calls": [{"name": "slow", "arguments": {}}]}, {"content": "done"}]
    )
    agent = Agent(name="slow", model=model, tools=[slow])
    service = keeping(RunStore(engine, clock=clock), agent, limits=Limits(lease=lease), clock=clock)
    holder.append(service)
    run, _ = service.start_run("slow", "x")
    assert service.run_segment(run.id, "w").outcome is Outcome.COMPLETED
    assert swept == [((), ())]  # nothing was reclaimed while the tool ran


def test_a_read_is_recorded_once_with_its_result_and_replayed(engine: Engine) -> None:
    repo = RunStore(engine)
    run, _ = repo.runs.create("reader", "x")
    ran: list[str] = []
    flushed: list[bool] = []

    @tool
    def look(q: str) -> str:
        ran.append(q)
        return f"found {q}"

    def invocation(call_id: str) -> ToolInvocation:
        return ToolInvocation(look, {"q": call_id}, ToolContext(run.id, call_id, "reader", "look"))

    def start(call_id: str, tool: str, effect: str, arguments: dict[str, JsonValue]) -> Any:
        flushed.append(True)
        raise AssertionError("a read is not started in the ledger")

    execute = LedgerExecutor(repo, run.id, start)
    assert execute(invocation("c1")) == ToolOutcome("found c1")
    assert execute(invocation("c1")) == ToolOutcome("found c1")  # a redelivery: replayed
    assert ran == ["c1"] and flushed == []  # a read acts on nothing: no flush before it
    (entry,) = repo.ledger.entries(run.id)
    assert (entry.call_id, entry.status, entry.result, entry.attempts) == (
        "c1",
        CallStatus.SUCCEEDED,
        "found c1",
        1,
    )


def test_a_redelivered_segment_replays_the_reads_it_recorded(engine: Engine) -> None:
    ran: list[str] = []
    script = ScriptedModel([{"tool_calls": [{"name": "peek", "arguments": {}}]}, {"content": "ok"}])

    @tool
    def peek() -> str:
        ran.append("peek")
        return f"seen {len(ran)}"

    holder: list[Service] = []

    def lose_the_database() -> None:
        let_time_pass(holder[0], 0.2)  # long enough for the segment's events to be written
        raise OperationalError("SELECT 1", {}, ConnectionError("server closed"))

    agent = Agent(name="reader", model=BeforeSecondCall(script, lose_the_database), tools=[peek])
    service = keeping(RunStore(engine), agent)
    holder.append(service)
    run, _ = service.start_run("reader", "x")
    with pytest.raises(SegmentInterruptedError) as stopped:
        service.run_segment(run.id, "w1")
    assert isinstance(stopped.value.__cause__, OperationalError)
    assert (stopped.value.take_over, stopped.value.adopt) == ("w1", True)
    # the read's record went out with its events, before the model call that failed
    assert [(e.tool, e.status, e.result) for e in service.store.ledger.entries(run.id)] == [
        ("peek", CallStatus.SUCCEEDED, "seen 1")
    ]
    assert service.run_segment(run.id, "w2", take_over="w1").outcome is Outcome.COMPLETED
    assert ran == ["peek"]  # replayed, not run again
    tools = [e.payload["result"] for e in service.store.events.read(run.id) if e.kind == "tool"]
    assert tools == ["seen 1", "seen 1"]


def test_a_segment_that_lost_its_lease_stops_before_acting(engine: Engine) -> None:
    """Another worker took the run over while the model thought: the segment writes
    nothing more, and the write the model then asks for never runs."""
    repo = RunStore(engine)
    sent: list[str] = []
    script = ScriptedModel(
        [
            {"tool_calls": [{"name": "peek", "arguments": {}}]},
            {"tool_calls": [{"name": "poke", "arguments": {}}]},
            {"content": "done"},
        ]
    )

    holder: list[Service] = []

    def lose_the_lease() -> None:  # it expired and another worker reclaimed the run
        with engine.begin() as conn:
            conn.execute(text("UPDATE agent_runs SET lease_owner = 'w2'"))
        let_time_pass(holder[0], 0.2)  # long enough for the keeper to try to write

    model = BeforeSecondCall(script, lose_the_lease)
    service = keeping(repo, peek_then_poke(model, lambda: sent.append("poke")))
    holder.append(service)
    run, _ = service.start_run("watched", "x")
    assert service.run_segment(run.id, "w1").outcome is Outcome.LEASE_LOST
    assert sent == []
    assert [e.kind for e in repo.events.read(run.id)] == ["request"]
    assert repo.ledger.entries(run.id) == []
    assert repo.runs.require(run.id).lease_owner == "w2"


def test_expiry_applies_to_a_partial_quorum_and_refuses_later_approvals(
    engine: Engine, clock: FakeClock
) -> None:
    from tests.integration.agents import one_call, transfer

    slow = Agent(
        name="slow_four_eyes",
        model=ScriptedModel(one_call("transfer", amount=9)),
        tools=[transfer],
        approval_ttl=timedelta(seconds=1),
    )
    service = Service(
        store=RunStore(engine, clock=clock),
        registry=Registry([*AGENTS, slow]),
        enqueue=Woken(),
        clock=clock,
    )
    run, _ = service.start_run("slow_four_eyes", "x")
    assert service.run_segment(run.id, "w").outcome is Outcome.SUSPENDED
    digest = service.store.runs.require(run.id).turn_digest or ""
    body = DecisionBody(turn_digest=digest, decision="approve")
    alice = Principal(id="alice", method="oidc", roles=frozenset({"treasury"}))
    assert service.record_decision(run.id, body, alice).result == "partial"
    clock.advance(seconds=2)
    bob = Principal(id="bob", method="oidc", roles=frozenset({"treasury"}))
    with pytest.raises(ConflictError) as late:  # expired, though the beat has not run yet
        service.record_decision(run.id, body, bob)
    assert late.value.expired
    assert service.expire_approvals() == (run.id,)
    decided = service.store.decisions.decision_for(run.id, digest)
    assert decided is not None and decided.decision["reason"] == "approval expired"
    with pytest.raises(ConflictError, match="another decision"):
        service.record_decision(run.id, body, bob)
    assert service.run_segment(run.id, "w").outcome is Outcome.COMPLETED
    assert service.store.ledger.entries(run.id) == []  # the transfer never ran


def test_the_sweeper_records_its_runs_and_goes_stale(engine: Engine, clock: FakeClock) -> None:
    """Beat's health is visible in the store (issue 27, defect 1): never, then ok after
    a sweep, then stale once no sweep came for a few intervals."""
    service = Service(
        store=RunStore(engine, clock=clock),
        registry=Registry([]),
        enqueue=lambda run_id, delay=None: None,
        clock=clock,
        limits=Limits(sweep_interval=timedelta(seconds=15)),
    )
    assert service.sweeper().state == "never"
    service.sweep()
    assert service.sweeper().last_run == clock.now and service.sweeper().state == "ok"
    clock.advance(seconds=60)
    assert service.sweeper().state == "ok"
    clock.advance(seconds=1)
    assert service.sweeper().state == "stale"
    assert service.stats().sweeper.state == "stale"
    service.sweep()
    assert service.sweeper().state == "ok" and service.sweeper().age_seconds == 0


def test_an_undecided_cancel_withdraws_a_run_only_while_none_of_its_calls_was_decided(
    engine: Engine,
) -> None:
    """The MCP gateway's ``tasks/cancel``: a run waiting for approval, or queued and never
    suspended, is cancelled; once a call of it was approved (queued again, running) the
    withdrawal is refused and the run goes on."""
    service, _ = make_service(engine)
    fresh, _ = service.start_run("w1", "x")
    assert service.cancel(fresh.id, by=OPERATOR, undecided=True).status is RunStatus.CANCELLED
    waiting, _ = service.start_run("w1", "x")
    service.run_segment(waiting.id, "w")
    assert service.cancel(waiting.id, by=OPERATOR, undecided=True).status is RunStatus.CANCELLED

    approved, _ = service.start_run("w1", "x")
    service.run_segment(approved.id, "w")
    digest = service.store.runs.require(approved.id).turn_digest or ""
    service.record_decision(
        approved.id, DecisionBody(turn_digest=digest, decision="approve"), OPERATOR
    )
    assert service.store.runs.require(approved.id).status is RunStatus.QUEUED
    with pytest.raises(ConflictError, match="can no longer be withdrawn"):
        service.cancel(approved.id, by=OPERATOR, undecided=True)
    assert service.store.transitions.claim(approved.id, "w", timedelta(seconds=30)) is not None
    with pytest.raises(ConflictError, match="can no longer be withdrawn"):
        service.cancel(approved.id, by=OPERATOR, undecided=True)
    assert service.store.runs.require(approved.id).status is RunStatus.RUNNING


def test_an_undecided_cancel_decides_on_the_run_its_statement_finds(engine: Engine) -> None:
    """Forced interleaving: the withdrawal reads a fresh queued run, then, before its
    cancelling statement, the run asks and is approved (queued again). The statement
    finds it suspended once and cancels nothing; the approved call goes on."""
    service, _ = make_service(engine)
    run, _ = service.start_run("w1", "x")
    cancel = service.store.transitions.cancel
    raced: list[str] = []

    def approved_first(run_id: str, **kw: Any) -> bool:
        if not raced:
            raced.append(run_id)
            service.run_segment(run_id, "w")
            digest = service.store.runs.require(run_id).turn_digest or ""
            body = DecisionBody(turn_digest=digest, decision="approve")
            service.record_decision(run_id, body, OPERATOR)
        return cancel(run_id, **kw)

    service.store.transitions.cancel = approved_first  # type: ignore[method-assign]
    with pytest.raises(ConflictError, match="can no longer be withdrawn"):
        service.cancel(run.id, by=OPERATOR, undecided=True)
    assert raced == [run.id]
    assert service.store.runs.require(run.id).status is RunStatus.QUEUED
    assert service.run_segment(run.id, "w").outcome is not Outcome.FAILED
