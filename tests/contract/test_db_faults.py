"""A dropped database connection at each statement of a segment, in turn (PostgreSQL: the
server terminates the backend, as a failover or a pooler restart does). Killed before
the statement is sent, or after it ran (its commit made, its answer lost): either way
the segment goes on on a fresh connection, the run completes, its approved write runs
exactly once, and nothing is found in doubt."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from airlock.loop import Approve
from airlock.persistence.db import make_engine
from airlock.persistence.domain import CallStatus, RunStatus
from airlock.persistence.store import RetryPolicy, RunStore
from airlock.workers.service import Limits, Outcome, SegmentInterruptedError, Service
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.service.registry import Registry
from tests.db_faults import ConnectionKiller, Pick
from tests.unit.agents import Recorder, answer, call, calls, make_agent

pytestmark = pytest.mark.postgres

QUICK = RetryPolicy(seconds=10, result_seconds=10, first_delay=0.005, max_delay=0.05)
STEPS = [
    calls(call("lookup", q="42")),
    calls(call("send_email", to="a@example.com", body="hi")),
    answer("done"),
]


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


@pytest.fixture
def killer(postgres_url: str) -> Iterator[ConnectionKiller]:
    killer = ConnectionKiller(postgres_url, lambda _n, _s: None).install()
    yield killer
    killer.uninstall()


def story(engine: Engine, killer: ConnectionKiller, pick: int, where: str) -> Recorder:
    """A run to its end, the statement number ``pick`` of its two segments (counted
    together) killed ``where``; the decision between them is made on a sound connection."""
    recorder = Recorder()
    service = Service(
        store=RunStore(engine, retry=QUICK),
        registry=Registry([make_agent(STEPS, recorder)]),
        enqueue=lambda _run, _delay=None: None,
        limits=Limits(retry_base_delay=0.01),
    )
    run, _ = service.start_run("mailer", "Mail a")
    killer.arm(lambda n, _s: where if n == pick else None)
    assert service.run_segment(run.id, "first").outcome is Outcome.SUSPENDED
    killer.disarm()
    digest = service.store.runs.require(run.id).turn_digest or ""
    body = DecisionBody(turn_digest=digest, decision="approve")
    service.record_decision(run.id, body, Principal.operator("ops"))
    killer.arm(reset=False)
    assert service.run_segment(run.id, "second").outcome is Outcome.COMPLETED
    killer.disarm()
    done = service.store.runs.require(run.id)
    assert (done.status, done.output) == (RunStatus.COMPLETED, "done")
    ledger = service.store.ledger.entries(run.id)
    assert [e.status for e in ledger] == [CallStatus.SUCCEEDED, CallStatus.SUCCEEDED]
    kinds = [e.kind for e in service.store.events.read(run.id)]
    assert "failed" not in kinds and "retry" not in kinds
    return recorder


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_dropped_connection_at_any_statement_of_a_segment_loses_nothing(
    pg_engine: Engine, killer: ConnectionKiller, where: str
) -> None:
    story(pg_engine, killer, -1, where)  # none killed: how many statements there are
    statements = killer.count
    assert statements >= 6  # claim, suspend; claim, start, result, finish at least
    for pick in range(statements):
        killer.killed.clear()
        recorder = story(pg_engine, killer, pick, where)
        assert [name for name, _, _ in recorder.calls] == ["send_email"], pick
        assert len(killer.killed) == 1, pick


def test_a_dropped_connection_around_a_write_ahead_checkpoint_loses_nothing(
    pg_engine: Engine, killer: ConnectionKiller
) -> None:
    """A write a policy approves runs in the segment that asked for it, after the
    write-ahead checkpoint: each of that segment's statements killed in turn, both ways."""

    def approve_all(_tool: object, _arguments: object) -> Approve:
        return Approve()

    def one_segment(pick: int, where: str) -> list[str]:
        recorder = Recorder()
        service = Service(
            store=RunStore(pg_engine, retry=QUICK),
            registry=Registry([make_agent(STEPS, recorder, policy=approve_all)]),
            enqueue=lambda _run, _delay=None: None,
            limits=Limits(retry_base_delay=0.01),
        )
        run, _ = service.start_run("mailer", "Mail a")
        killer.arm(lambda n, _s: where if n == pick else None)
        assert service.run_segment(run.id, "only").outcome is Outcome.COMPLETED
        killer.disarm()
        done = service.store.runs.require(run.id)
        assert (done.status, done.output) == (RunStatus.COMPLETED, "done")
        return [name for name, _, _ in recorder.calls]

    one_segment(-1, "before")
    statements = killer.count
    assert statements >= 4  # claim, checkpoint, start, result, finish
    kinds = set()
    for where in ("before", "after"):
        for pick in range(statements):
            killer.killed.clear()
            assert one_segment(pick, where) == ["send_email"], (where, pick)
            assert len(killer.killed) == 1
            kinds.add(killer.killed[0][1])
    assert any("tool_calls" in kind for kind in kinds)


AWAY = RetryPolicy(seconds=0.2, result_seconds=0.2, first_delay=0.01, max_delay=0.05)
"""A budget the database stays away past, in the tests that keep it away."""


def away_after(pick: int) -> Pick:
    """The statement ``pick`` runs and its answer is lost; from then on, the database is
    away (every statement's connection killed before it is sent) until disarmed."""
    gone: list[bool] = []

    def where(number: int, _statement: str) -> str | None:
        if gone:
            return "before"
        if number == pick:
            gone.append(True)
            return "after"
        return None

    return where


def interrupted(service: Service, run_id: str, owner: str) -> SegmentInterruptedError | None:
    """The segment run while the killer is armed: how it stopped, if it did."""
    try:
        service.run_segment(run_id, owner)
    except SegmentInterruptedError as stopped:
        return stopped
    return None


def test_a_segment_stopped_by_a_database_away_past_its_budget_is_continued_by_its_retry(
    pg_engine: Engine, killer: ConnectionKiller
) -> None:
    """Each statement of a segment that runs a write: its answer lost, then the database
    away longer than the retry budget, so the segment stops. Its retry (as the task makes
    it, with what the stop says) completes the run, the write runs once and nothing is in
    doubt: a call whose start was recorded but never answered was not run."""

    def approve_all(_tool: object, _arguments: object) -> Approve:
        return Approve()

    def attempt(pick: int) -> list[str]:
        recorder = Recorder()
        service = Service(
            store=RunStore(pg_engine, retry=AWAY),
            registry=Registry([make_agent(STEPS, recorder, policy=approve_all)]),
            enqueue=lambda _run, _delay=None: None,
            limits=Limits(retry_base_delay=0.01),
        )
        run, _ = service.start_run("mailer", "Mail a")
        killer.arm(away_after(pick))
        stopped = interrupted(service, run.id, "first")
        killer.disarm()
        if stopped is not None:
            again = service.run_segment(
                run.id, "retry", take_over=stopped.take_over, adopt=stopped.adopt
            )
            assert again.outcome in (Outcome.COMPLETED, Outcome.SKIPPED), (pick, again)
        done = service.store.runs.require(run.id)
        assert (done.status, done.output, done.error) == (RunStatus.COMPLETED, "done", None)
        ledger = service.store.ledger.entries(run.id)
        assert {e.status for e in ledger} == {CallStatus.SUCCEEDED}, pick
        return [name for name, _, _ in recorder.calls]

    attempt(-1)
    statements = killer.count
    starts = 0
    for pick in range(statements):
        killer.killed.clear()
        assert attempt(pick) == ["send_email"], pick
        starts += "tool_calls" in killer.killed[0][1]
    assert starts >= 2  # the write's start, and its result


def test_a_result_lost_past_its_budget_leaves_the_call_in_doubt_and_not_run_twice(
    pg_engine: Engine, killer: ConnectionKiller
) -> None:
    """The write ran but the database stayed away past the budget of its result: only
    that segment knew it, so its retry finds the call in doubt (it adopts nothing) and
    does not run it again."""

    def approve_all(_tool: object, _arguments: object) -> Approve:
        return Approve()

    recorder = Recorder()
    service = Service(
        store=RunStore(pg_engine, retry=AWAY),
        registry=Registry([make_agent(STEPS, recorder, policy=approve_all)]),
        enqueue=lambda _run, _delay=None: None,
        limits=Limits(retry_base_delay=0.01),
    )
    run, _ = service.start_run("mailer", "Mail a")

    def away_at_the_result(_number: int, statement: str) -> str | None:
        return "before" if recorder.calls else None

    killer.arm(away_at_the_result)
    stopped = interrupted(service, run.id, "first")
    killer.disarm()
    assert stopped is not None and stopped.take_over == "first" and not stopped.adopt
    again = service.run_segment(run.id, "retry", take_over=stopped.take_over, adopt=False)
    assert again.outcome is Outcome.FAILED and "InDoubtCallError" in (again.error or "")
    assert len(recorder.calls) == 1


def test_a_retry_that_could_not_claim_hands_on_the_claim_it_was_to_continue(
    pg_engine: Engine, killer: ConnectionKiller
) -> None:
    """The database away past the budget twice: the segment stops after its write's start
    was recorded, and its first retry stops before it could claim anything. The second
    retry continues the first segment's claim (it does not wait for that lease to expire)
    and runs the write it had started, once."""

    def approve_all(_tool: object, _arguments: object) -> Approve:
        return Approve()

    recorder = Recorder()
    service = Service(
        store=RunStore(pg_engine, retry=AWAY),
        registry=Registry([make_agent(STEPS, recorder, policy=approve_all)]),
        enqueue=lambda _run, _delay=None: None,
        limits=Limits(retry_base_delay=0.01),
    )
    run, _ = service.start_run("mailer", "Mail a")
    gone: list[bool] = []

    def start_then_away(_number: int, statement: str) -> str | None:
        if gone:
            return "before"
        if "started_by" in statement:  # the write's start (its reads ran before)
            gone.append(True)
            return "after"
        return None

    killer.arm(start_then_away)
    first = interrupted(service, run.id, "first")
    assert first is not None and (first.take_over, first.adopt) == ("first", True)
    killer.arm(lambda _n, _s: "before")
    with pytest.raises(SegmentInterruptedError) as failed:
        service.run_segment(run.id, "second", take_over=first.take_over, adopt=first.adopt)
    killer.disarm()
    second = failed.value
    assert (second.take_over, second.adopt) == ("first", True)
    third = service.run_segment(run.id, "third", take_over=second.take_over, adopt=second.adopt)
    assert third.outcome is Outcome.COMPLETED
    assert [name for name, _, _ in recorder.calls] == ["send_email"]


def test_a_retry_whose_claim_is_tried_again_still_adopts_the_call_it_continues(
    pg_engine: Engine, killer: ConnectionKiller
) -> None:
    """The segment stops after its write's start was recorded (its answer lost, then the
    database away), and its run is queued again meanwhile (the sweeper found its lease
    expired). The retry's first claim is lost on a dropped connection: claimed on the
    next attempt, it still takes over the write the stopped segment started, and runs
    it once."""

    def approve_all(_tool: object, _arguments: object) -> Approve:
        return Approve()

    recorder = Recorder()
    service = Service(
        store=RunStore(pg_engine, retry=AWAY),
        registry=Registry([make_agent(STEPS, recorder, policy=approve_all)]),
        enqueue=lambda _run, _delay=None: None,
        limits=Limits(retry_base_delay=0.01),
    )
    run, _ = service.start_run("mailer", "Mail a")
    gone: list[bool] = []

    def start_then_away(_number: int, statement: str) -> str | None:
        if gone:
            return "before"
        if "started_by" in statement:
            gone.append(True)
            return "after"
        return None

    killer.arm(start_then_away)
    stopped = interrupted(service, run.id, "first")
    killer.disarm()
    assert stopped is not None and stopped.adopt
    assert service.store.transitions.requeue(run.id, "first")  # as the sweeper would
    claims: list[str] = []

    def first_claim(_number: int, statement: str) -> str | None:
        if "attempts" not in statement or claims:  # the claim's UPDATE counts them
            return None
        claims.append(statement)
        return "before"

    killer.arm(first_claim)
    killer.killed.clear()
    again = service.run_segment(run.id, "retry", take_over=stopped.take_over, adopt=True)
    killer.disarm()
    assert len(killer.killed) == 1  # the first claim: the second has no rival to lose to
    assert again.outcome is Outcome.COMPLETED, again
    assert [name for name, _, _ in recorder.calls] == ["send_email"]
