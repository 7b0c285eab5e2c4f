"""The run store's contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from cryptography.fernet import Fernet
from pydantic import JsonValue
from sqlalchemy import Engine, text, update
from sqlalchemy.exc import OperationalError, StatementError

from airlock.loop import StateError, Usage
from airlock.persistence.crypto import StateCipher
from airlock.persistence.db import make_engine
from airlock.persistence.domain import CallRecord, CallStatus, RunStatus
from airlock.persistence.store import (
    BadCursorError,
    Event,
    LeaseLostError,
    Prior,
    Receipt,
    RetryPolicy,
    RunStore,
    UnknownRunError,
)
from airlock.persistence.store.sql import RUNS
from tests.conftest import FakeClock
from tests.contract.helpers import (
    APPROVE,
    DENY,
    LEASE,
    sent_to_postgres,
    suspended_state,
    waiting_run,
)


@pytest.fixture
def repo(engine: Engine, clock: FakeClock) -> RunStore:
    return RunStore(engine, clock=clock)


def test_create_and_get(repo: RunStore) -> None:
    run, created = repo.runs.create("mailer", "Mail 42", metadata={"ticket": 7})
    assert created
    got = repo.runs.require(run.id)
    assert got == run
    assert (got.status, got.iterations, got.usage, got.metadata) == (
        RunStatus.QUEUED,
        0,
        Usage(0, 0),
        {"ticket": 7},
    )


def test_a_run_read_by_id_is_the_run_sqlalchemy_reads(repo: RunStore) -> None:
    """``get`` reads through the driver on PostgreSQL (a poll's statement): every column
    comes back as SQLAlchemy's own types would give it (text that needed escaping,
    JSON, aware timestamps, the waiting checkpoint)."""
    from airlock.persistence.store.runs import to_run
    from airlock.persistence.store.sql import RUN_BY_ID

    run, state = waiting_run(repo)
    with repo.engine.begin() as conn:
        conn.execute(
            update(RUNS)
            .where(RUNS.c.id == uuid.UUID(run.id))
            .values({RUNS.c.output: "a\x00b \ud800", RUNS.c.metadata: {"k": [1, "é"]}})
        )
    got = repo.runs.require(run.id)
    with repo.engine.connect() as conn:
        row = conn.execute(RUN_BY_ID, {"rid": uuid.UUID(run.id)}).mappings().one()
    assert got == to_run(row)
    assert (got.output, got.metadata) == ("a\x00b \ud800", {"k": [1, "é"]})
    assert got.created_at.tzinfo is not None and got.checkpoint is not None
    assert repo.runs.load_state(got).turn_digest == state.turn_digest


def test_a_run_is_created_with_its_first_event(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x", first_event=("request", {"input": "x"}))
    assert [(e.seq, e.kind, e.payload) for e in repo.events.read(run.id)] == [
        (1, "request", {"input": "x"})
    ]
    assert repo.events.append_event(run.id, "llm", {}) == 2
    again, created = repo.runs.create("m", "y", idempotency_key="k", first_event=("request", {}))
    same, created_again = repo.runs.create(
        "m", "z", idempotency_key="k", first_event=("request", {})
    )
    assert created and not created_again and same.id == again.id
    assert len(repo.events.read(again.id)) == 1


def test_idempotency_key_returns_the_first_run(repo: RunStore) -> None:
    first, created = repo.runs.create("mailer", "a", idempotency_key="k-1")
    again, created_again = repo.runs.create("mailer", "b", idempotency_key="k-1")
    assert created and not created_again
    assert again.id == first.id and again.input == "a"


@pytest.mark.parametrize(
    "run_id", [str(uuid.uuid4()), "not-a-uuid", ""], ids=["unknown", "malformed", "empty"]
)
def test_unknown_or_malformed_ids_are_not_found(repo: RunStore, run_id: str) -> None:
    assert repo.runs.get(run_id) is None
    assert repo.transitions.claim(run_id, "w", LEASE) is None
    assert not repo.transitions.cancel(run_id)
    with pytest.raises(UnknownRunError):
        repo.runs.require(run_id)


def test_claim_is_a_guarded_transition(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    claimed = repo.transitions.claim(run.id, "w1", LEASE)
    assert claimed is not None
    assert (claimed.id, claimed.agent, claimed.input) == (run.id, "mailer", "x")
    assert claimed.attempts == 1
    assert not claimed.has_checkpoint and claimed.checkpoint is None
    running = repo.runs.require(run.id)
    assert running.status is RunStatus.RUNNING
    assert running.lease_owner == "w1"
    assert running.lease_expires_at == clock.now + LEASE
    assert running.attempts == 1
    assert running.version == run.version + 1
    assert repo.transitions.claim(run.id, "w2", LEASE) is None
    assert repo.runs.require(run.id).lease_owner == "w1"


@pytest.mark.parametrize("text", ["\x1bb64:aGk=", "nul \x00 here", "lone \ud800"])
def test_a_claim_returns_the_input_as_given(repo: RunStore, text: str) -> None:
    """Text the databases cannot store as is (or that looks stored escaped) comes back
    from the claim's RETURNING exactly as it was given, decoded once."""
    run, _ = repo.runs.create("mailer", text)
    claimed = repo.transitions.claim(run.id, "w1", LEASE)
    assert claimed is not None and claimed.input == text


def test_only_the_lease_owner_renews(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "w1", LEASE)
    clock.advance(seconds=10)
    assert repo.transitions.renew_lease(run.id, "w1", LEASE)
    assert not repo.transitions.renew_lease(run.id, "intruder", LEASE)
    assert repo.runs.require(run.id).lease_expires_at == clock.now + LEASE


def test_leases_are_renewed_together_each_by_its_owner_only(
    repo: RunStore, clock: FakeClock
) -> None:
    """One statement renews every lease a process holds: each only for its owner and
    while its run runs; what it did not renew is named by its absence."""
    mine = [repo.runs.create("mailer", f"x{i}")[0] for i in range(3)]
    for run in mine:
        repo.transitions.claim(run.id, "w1", LEASE)
    theirs, _ = repo.runs.create("mailer", "y")
    repo.transitions.claim(theirs.id, "w2", LEASE)
    given_back = mine[2]
    assert repo.transitions.requeue(given_back.id, "w1")
    queued, _ = repo.runs.create("mailer", "z")
    clock.advance(seconds=10)

    held = {run.id: "w1" for run in mine} | {theirs.id: "w1", queued.id: "w1", "nonsense": "w1"}
    renewed = repo.transitions.renew_leases(held, LEASE, apart=True)

    assert renewed == {mine[0].id, mine[1].id}
    for run in mine[:2]:
        assert repo.runs.require(run.id).lease_expires_at == clock.now + LEASE
    claimed_at = clock.now - timedelta(seconds=10)
    assert repo.runs.require(theirs.id).lease_expires_at == claimed_at + LEASE
    assert repo.runs.require(given_back.id).status is RunStatus.QUEUED
    assert repo.runs.require(queued.id).lease_owner is None
    assert repo.transitions.renew_leases({}, LEASE) == set()


def test_suspend_stores_checkpoint_counters_and_digest(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "w1", LEASE)
    state = suspended_state(run.id)
    assert not repo.transitions.suspend(run.id, "intruder", state, expires_at=None)
    expires = clock.now + timedelta(hours=1)
    assert repo.transitions.suspend(run.id, "w1", state, expires_at=expires)
    waiting = repo.runs.require(run.id)
    assert waiting.status is RunStatus.WAITING_FOR_APPROVAL
    assert (waiting.iterations, waiting.usage) == (2, Usage(30, 5))
    assert waiting.turn_digest == state.turn_digest
    assert (waiting.suspended_at, waiting.expires_at) == (clock.now, expires)
    assert waiting.lease_owner is None and waiting.has_checkpoint
    assert repo.runs.load_state(waiting) == state


def test_counters_are_kept_current_and_never_lowered(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "w1", LEASE)
    llm: Event = ("llm", {})
    repo.events.append_events(run.id, [llm], counters=(3, Usage(30, 4)), owner="w1")
    repo.events.append_events(run.id, [llm], counters=(1, Usage(0, 0)), owner="w1")  # a replay
    with pytest.raises(LeaseLostError):
        repo.events.append_events(run.id, [llm], counters=(9, Usage(90, 9)), owner="other")
    current = repo.runs.require(run.id)
    assert (current.iterations, current.usage) == (3, Usage(30, 4))


def test_decision_moves_waiting_to_queued_once(repo: RunStore) -> None:
    run, state = waiting_run(repo)
    outcome = repo.decisions.record_decision(
        run.id,
        state.turn_digest,
        APPROVE,
        approver="ann",
        receipt=receipt("desk", "wh-1", "approve"),
    )
    assert outcome.result == "recorded"
    assert outcome.stored is not None and outcome.stored.approver == "ann"
    after = repo.runs.require(run.id)
    assert after.status is RunStatus.QUEUED
    assert (after.iterations, after.usage) == (run.iterations, run.usage)

    same = repo.decisions.record_decision(run.id, state.turn_digest, APPROVE, approver="bob")
    assert same.result == "duplicate" and same.stored == outcome.stored
    replay = repo.decisions.record_decision(
        run.id, state.turn_digest, APPROVE, receipt=receipt("desk", "wh-1", "approve")
    )
    assert replay.result == "duplicate" and replay.stored == outcome.stored
    # the same id asking for something else: no replay of it
    reused = repo.decisions.record_decision(
        run.id, state.turn_digest, DENY, receipt=receipt("desk", "wh-1", "deny")
    )
    assert reused.result == "conflict" and "another request" in (reused.reason or "")
    other = repo.decisions.record_decision(run.id, state.turn_digest, DENY)
    assert other.result == "conflict" and other.reason is not None
    assert "already recorded" in other.reason
    assert repo.runs.require(run.id).version == after.version


def test_decision_for_another_turn_or_state_is_refused(repo: RunStore) -> None:
    run, state = waiting_run(repo)
    wrong = repo.decisions.record_decision(run.id, "0" * 64, APPROVE)
    assert wrong.result == "conflict" and "digest" in (wrong.reason or "")
    assert repo.runs.require(run.id) == run
    assert repo.decisions.decision_for(run.id, "0" * 64) is None

    queued, _ = repo.runs.create("mailer", "y")
    not_waiting = repo.decisions.record_decision(queued.id, state.turn_digest, APPROVE)
    assert not_waiting.result == "conflict" and "not waiting" in (not_waiting.reason or "")
    assert (
        repo.decisions.record_decision(str(uuid.uuid4()), state.turn_digest, APPROVE).result
        == "not_found"
    )


def receipt(client: str, webhook_id: str, request: str) -> Receipt:
    return Receipt(client, webhook_id, request)


def test_webhook_id_of_another_run_is_refused(repo: RunStore) -> None:
    first, s1 = waiting_run(repo)
    second, s2 = waiting_run(repo)
    decide = repo.decisions.record_decision
    desk = receipt("desk", "wh", "approve")
    assert decide(first.id, s1.turn_digest, APPROVE, receipt=desk).result == "recorded"
    reused = decide(second.id, s2.turn_digest, APPROVE, receipt=desk)
    assert reused.result == "conflict" and "already used" in (reused.reason or "")
    assert repo.runs.require(second.id).status is RunStatus.WAITING_FOR_APPROVAL
    # each client's ids are its own: another's "wh" is no replay
    bank = receipt("bank", "wh", "approve")
    assert decide(second.id, s2.turn_digest, APPROVE, receipt=bank).result == "recorded"


def test_finish_clears_lease_and_checkpoint(repo: RunStore) -> None:
    run, state = waiting_run(repo)
    repo.decisions.record_decision(run.id, state.turn_digest, APPROVE)
    repo.transitions.claim(run.id, "w2", LEASE)
    assert not repo.transitions.finish(run.id, RunStatus.COMPLETED, owner="w1")
    assert repo.transitions.finish(
        run.id,
        RunStatus.COMPLETED,
        owner="w2",
        termination="completed",
        output="done",
        iterations=3,
        usage=Usage(40, 6),
    )
    done = repo.runs.require(run.id)
    assert (done.status, done.output, done.termination) == (
        RunStatus.COMPLETED,
        "done",
        "completed",
    )
    assert not done.has_checkpoint and done.lease_owner is None and done.lease_expires_at is None
    assert (done.iterations, done.usage) == (3, Usage(40, 6))
    assert not repo.transitions.cancel(run.id)
    assert not repo.transitions.finish(run.id, RunStatus.FAILED, expected=[RunStatus.RUNNING])


def test_a_failed_run_keeps_its_checkpoint_and_can_be_retried(repo: RunStore) -> None:
    run, state = waiting_run(repo)
    repo.decisions.record_decision(run.id, state.turn_digest, APPROVE)
    repo.transitions.claim(run.id, "w2", LEASE)
    assert repo.transitions.finish(run.id, RunStatus.FAILED, owner="w2", error="boom")
    failed = repo.runs.require(run.id)
    assert failed.status is RunStatus.FAILED and failed.error == "boom" and failed.has_checkpoint
    assert (failed.iterations, failed.usage) == (run.iterations, run.usage)
    assert repo.transitions.retry(run.id)
    again = repo.runs.require(run.id)
    assert again.status is RunStatus.QUEUED and again.error is None
    assert repo.runs.load_state(again) == state
    reclaimed = repo.transitions.claim(run.id, "w3", LEASE)
    assert reclaimed is not None and reclaimed.has_checkpoint and reclaimed.checkpoint
    assert repo.runs.load_state(reclaimed) == state
    assert not repo.transitions.retry(run.id)


@pytest.mark.parametrize("status", ["queued", "running", "waiting_for_approval"])
def test_cancel_from_any_active_status(repo: RunStore, status: str) -> None:
    run, _ = repo.runs.create("mailer", "x")
    if status != "queued":
        repo.transitions.claim(run.id, "w1", LEASE)
    if status == "waiting_for_approval":
        repo.transitions.suspend(run.id, "w1", suspended_state(run.id), None)
    assert repo.transitions.cancel(run.id)
    cancelled = repo.runs.require(run.id)
    assert cancelled.status is RunStatus.CANCELLED and not cancelled.has_checkpoint
    assert not repo.transitions.cancel(run.id)


def test_a_transition_and_its_events_are_one_transaction(repo: RunStore) -> None:
    run, state = waiting_run(repo)
    before = [e.seq for e in repo.events.read(run.id)]
    unwritable: dict[str, JsonValue] = {"by": object()}  # type: ignore[dict-item]
    with pytest.raises((StatementError, TypeError)):
        repo.transitions.cancel(run.id, events=[("expired", {}), ("cancelled", unwritable)])
    with pytest.raises((StatementError, TypeError)):
        repo.decisions.record_decision(
            run.id, state.turn_digest, APPROVE, events=[("decision", unwritable)]
        )
    assert repo.runs.require(run.id) == run  # neither transition happened
    assert [e.seq for e in repo.events.read(run.id)] == before  # nor any event of them
    assert repo.decisions.decision_for(run.id, state.turn_digest) is None

    recorded = repo.decisions.record_decision(
        run.id, state.turn_digest, APPROVE, events=[("decision", {"approver": "ann"})]
    )
    assert recorded.result == "recorded"
    again = repo.decisions.record_decision(
        run.id, state.turn_digest, APPROVE, events=[("decision", {})]
    )
    assert again.result == "duplicate"
    assert repo.transitions.cancel(run.id, events=[("expired", {}), ("cancelled", {"by": "t"})])
    assert not repo.transitions.cancel(run.id, events=[("cancelled", {"by": "late"})])
    tail = [(e.kind, e.payload) for e in repo.events.read(run.id)][len(before) :]
    assert tail == [("decision", {"approver": "ann"}), ("expired", {}), ("cancelled", {"by": "t"})]


def test_expired_leases_are_requeued_then_failed(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    live, _ = repo.runs.create("mailer", "y")
    repo.transitions.claim(run.id, "dead-worker", LEASE)
    clock.advance(seconds=20)
    repo.transitions.claim(live.id, "w2", LEASE)
    clock.advance(seconds=15)
    reclaimed = repo.transitions.reclaim_expired_leases(max_attempts=2)
    assert reclaimed.requeued == (run.id,) and reclaimed.failed == ()
    assert repo.runs.require(run.id).status is RunStatus.QUEUED
    assert repo.runs.require(live.id).status is RunStatus.RUNNING
    # the zombie worker can no longer write
    assert not repo.transitions.finish(run.id, RunStatus.COMPLETED, owner="dead-worker")

    repo.transitions.claim(run.id, "dead-again", LEASE)
    clock.advance(seconds=31)
    reclaimed = repo.transitions.reclaim_expired_leases(max_attempts=2)
    assert run.id in reclaimed.failed
    failed = repo.runs.require(run.id)
    assert failed.status is RunStatus.FAILED and "giving up after 2 attempts" in (
        failed.error or ""
    )


def test_stale_queued_runs_are_found_and_touched(repo: RunStore, clock: FakeClock) -> None:
    old, _ = repo.runs.create("mailer", "x")
    clock.advance(minutes=5)
    fresh, _ = repo.runs.create("mailer", "y")
    assert repo.queries.stale_queued(timedelta(minutes=1)) == [old.id]
    repo.transitions.touch_queued([old.id])
    assert repo.queries.stale_queued(timedelta(minutes=1)) == []
    assert fresh.id not in repo.queries.stale_queued(timedelta(seconds=0))  # created "now"


def test_expired_approvals(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "w1", LEASE)
    repo.transitions.suspend(
        run.id, "w1", suspended_state(run.id), clock.now + timedelta(minutes=10)
    )
    waiting_run(repo)  # waits with no expiry: never listed
    assert repo.queries.expired_approvals() == []
    clock.advance(minutes=11)
    assert repo.queries.expired_approvals() == [run.id]


def test_keyset_pagination_with_filters(repo: RunStore, clock: FakeClock) -> None:
    ids = []
    for i in range(7):
        run, _ = repo.runs.create("mailer" if i % 2 else "clerk", f"run {i}")
        ids.append(run.id)
        if i % 3 == 0:
            clock.advance(seconds=1)  # some runs share a timestamp: the id breaks the tie
    seen: list[str] = []
    cursor = None
    while True:
        page = repo.queries.list_runs(limit=3, cursor=cursor)
        seen += [r.id for r in page.runs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(ids) and len(seen) == 7
    assert [r.agent for r in repo.queries.list_runs(agent="clerk", limit=100).runs] == ["clerk"] * 4
    repo.transitions.cancel(ids[0])
    cancelled = repo.queries.list_runs(status=RunStatus.CANCELLED).runs
    assert [r.id for r in cancelled] == [ids[0]]
    with pytest.raises(BadCursorError):
        repo.queries.list_runs(cursor="garbage!")


def test_an_event_can_raise_the_counters_in_the_same_write(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.events.append_event(run.id, "llm", {}, counters=(2, Usage(20, 4)))
    repo.events.append_event(run.id, "llm", {}, counters=(1, Usage(5, 1)))  # a replay: never lowers
    current = repo.runs.require(run.id)
    assert (current.iterations, current.usage) == (2, Usage(20, 4))


def test_events_have_a_gap_free_sequence(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    seqs = [repo.events.append_event(run.id, "llm", {"n": i}) for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    events = repo.events.read(run.id)
    assert [(e.seq, e.payload["n"]) for e in events] == [(i + 1, i) for i in range(5)]
    assert [e.seq for e in repo.events.read(run.id, after=3)] == [4, 5]
    with pytest.raises(UnknownRunError):
        repo.events.append_event(str(uuid.uuid4()), "llm", {})


def test_tool_call_ledger(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    entry, fresh = repo.ledger.start_call(run.id, "c1", "send_email", "write", {"to": "a"})
    assert fresh and entry.status is CallStatus.STARTED
    again, fresh_again = repo.ledger.start_call(run.id, "c1", "send_email", "write", {"to": "a"})
    assert not fresh_again and again.status is CallStatus.STARTED
    assert [e.call_id for e in repo.ledger.in_doubt_calls(run.id)] == ["c1"]
    repo.ledger.finish_call(run.id, "c1", "sent", is_error=False)
    repo.ledger.finish_call(run.id, "c1", "overwritten?", is_error=True)
    done, _ = repo.ledger.start_call(run.id, "c1", "send_email", "write", {"to": "a"})
    assert (done.status, done.result, done.is_error) == (CallStatus.SUCCEEDED, "sent", False)
    assert repo.ledger.in_doubt_calls(run.id) == []
    repo.ledger.start_call(run.id, "c2", "upsert", "idempotent_write", {})
    repo.ledger.restart_call(run.id, "c2")
    assert [(e.call_id, e.attempts) for e in repo.ledger.entries(run.id)] == [("c1", 1), ("c2", 2)]


def test_state_is_encrypted_at_rest(engine: Engine, clock: FakeClock) -> None:
    key = Fernet.generate_key().decode()
    repo = RunStore(engine, cipher=StateCipher(key), clock=clock)
    run, state = waiting_run(repo)
    with engine.connect() as conn:
        stored = conn.execute(text("select suspended_state from agent_runs")).scalar_one()
    assert stored.startswith("fernet:") and "send_email" not in stored
    assert repo.runs.load_state(run) == state

    rotated = RunStore(engine, cipher=StateCipher(f"{Fernet.generate_key().decode()},{key}"))
    assert rotated.runs.load_state(run) == state
    with pytest.raises(StateError, match="cannot be decrypted"):
        RunStore(engine, cipher=StateCipher(Fernet.generate_key().decode())).runs.load_state(run)
    with pytest.raises(StateError, match="AIRLOCK_STATE_KEY is not set"):
        RunStore(engine).runs.load_state(run)

    tampered = stored[:-8] + ("A" * 8 if not stored.endswith("A" * 8) else "B" * 8)
    with engine.begin() as conn:
        conn.execute(text("update agent_runs set suspended_state = :s"), {"s": tampered})
    with pytest.raises(StateError, match="cannot be decrypted"):
        repo.runs.load_state(repo.runs.require(run.id))  # read again: a Run is a snapshot


def test_plaintext_state_is_refused_when_a_key_is_set(engine: Engine, clock: FakeClock) -> None:
    run, _ = waiting_run(RunStore(engine, clock=clock))
    keyed = RunStore(engine, cipher=StateCipher(Fernet.generate_key().decode()))
    with pytest.raises(StateError, match="not encrypted"):
        keyed.runs.load_state(run)


def test_tampered_plain_state_is_refused(repo: RunStore, engine: Engine) -> None:
    run, state = waiting_run(repo)
    blob = state.to_json().replace("a@example.com", "mallory@example.com")
    with engine.begin() as conn:
        conn.execute(text("update agent_runs set suspended_state = :s"), {"s": blob})
    with pytest.raises(StateError, match="tampered"):
        repo.runs.load_state(repo.runs.require(run.id))  # read again: a Run is a snapshot


def test_bad_state_key_names_the_variable() -> None:
    with pytest.raises(ValueError, match="AIRLOCK_STATE_KEY"):
        StateCipher("not-a-key")


def test_purge_removes_old_finished_runs_in_batches(repo: RunStore, clock: FakeClock) -> None:
    old = []
    for i in range(5):
        run, _ = repo.runs.create("mailer", f"old {i}")
        repo.events.append_event(run.id, "request", {})
        repo.ledger.start_call(run.id, "c", "lookup", "read", {})
        repo.transitions.cancel(run.id)
        old.append(run.id)
    waiting, _ = waiting_run(repo)
    clock.advance(days=31)
    recent, _ = repo.runs.create("mailer", "recent")
    repo.transitions.cancel(recent.id)
    progress: list[int] = []
    removed = repo.retention.purge(timedelta(days=30), batch_size=2, progress=progress.append)
    assert removed == 5
    assert progress == [2, 4, 5]
    assert all(repo.runs.get(i) is None for i in old)
    assert all(repo.events.read(i) == [] for i in old)
    assert repo.runs.get(waiting.id) is not None and repo.runs.get(recent.id) is not None
    assert repo.retention.purge(timedelta(days=30)) == 0


def test_count_by_status(repo: RunStore) -> None:
    a, _ = repo.runs.create("mailer", "x")
    repo.runs.create("mailer", "y")
    repo.transitions.cancel(a.id)
    counts = repo.queries.count_by_status()
    assert counts[RunStatus.QUEUED] == 1 and counts[RunStatus.CANCELLED] == 1
    assert counts[RunStatus.RUNNING] == 0


def _read(call_id: str, result: str, clock: FakeClock) -> CallRecord:
    return CallRecord(
        call_id, "lookup", "read", {"q": call_id}, result, False, clock.now, clock.now
    )


def test_reads_are_recorded_with_the_events_that_tell_of_them(
    repo: RunStore, clock: FakeClock
) -> None:
    run, _ = repo.runs.create("mailer", "x")
    claim = repo.transitions.claim(run.id, "w1", LEASE)
    assert claim is not None and not claim.ledger  # nothing in the ledger: nothing to replay
    tool: Event = ("tool", {"call_id": "c1"})
    assert repo.events.append_events(run.id, [tool], calls=[_read("c1", "first", clock)]) == [1]
    # a duplicate segment's record of the same call: the first one stays
    assert repo.events.append_events(run.id, [tool], calls=[_read("c1", "again", clock)]) == [2]
    (entry,) = repo.ledger.entries(run.id)
    assert (entry.call_id, entry.status, entry.result) == ("c1", CallStatus.SUCCEEDED, "first")
    # with the final transition, and only if it happens
    done: Event = ("completed", {})
    calls = [_read("c2", "two", clock), _read("c3", "three", clock)]
    assert not repo.transitions.finish(
        run.id, RunStatus.COMPLETED, owner="w2", events=[done], calls=calls
    )
    assert [e.call_id for e in repo.ledger.entries(run.id)] == ["c1"]
    assert repo.transitions.finish(
        run.id, RunStatus.COMPLETED, owner="w1", events=[done], calls=calls
    )
    assert [(e.call_id, e.result) for e in repo.ledger.entries(run.id)] == [
        ("c1", "first"),
        ("c2", "two"),
        ("c3", "three"),
    ]
    assert [e.kind for e in repo.events.read(run.id)] == ["tool", "tool", "completed"]
    with pytest.raises(ValueError, match="with the events"):
        repo.events.append_events(run.id, [], calls=calls)


def test_a_claim_says_whether_the_ledger_holds_calls(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.ledger.start_call(run.id, "c1", "send_email", "write", {})
    claim = repo.transitions.claim(run.id, "w1", LEASE)
    assert claim is not None and claim.ledger


def test_each_segment_is_claimed_afresh(repo: RunStore) -> None:
    """Attempts count the claims of one segment: a run that waited for approval many
    times keeps all its retries and reclaims for the segment it is in."""
    run, state = waiting_run(repo)
    assert repo.runs.require(run.id).attempts == 0
    assert repo.decisions.record_decision(run.id, state.turn_digest, APPROVE).result == "recorded"
    claim = repo.transitions.claim(run.id, "w2", LEASE)
    assert claim is not None and claim.attempts == 1


def test_a_resumes_claim_carries_the_decision_of_its_turn(repo: RunStore) -> None:
    """The claim reads the decision with the run, in its one statement: only the one
    for the turn the run waited on, and none for a run that never waited."""
    fresh, _ = repo.runs.create("mailer", "x")
    claim = repo.transitions.claim(fresh.id, "w1", LEASE)
    assert claim is not None and claim.decision is None and claim.approver is None
    run, state = waiting_run(repo)
    other, other_state = waiting_run(repo)
    repo.decisions.record_decision(other.id, other_state.turn_digest, DENY, approver="eve")
    repo.decisions.record_decision(run.id, state.turn_digest, APPROVE, approver="bob")
    claim = repo.transitions.claim(run.id, "w2", LEASE)
    assert claim is not None and claim.decision is not None
    assert repo.decisions.opened(claim.decision) == APPROVE
    assert claim.approver == "bob"


def test_a_sealed_decision_is_opened_from_the_claim(engine: Engine) -> None:
    sealed = RunStore(engine, cipher=StateCipher(Fernet.generate_key().decode()))
    run, state = waiting_run(sealed)
    sealed.decisions.record_decision(run.id, state.turn_digest, APPROVE, approver="bob")
    claim = sealed.transitions.claim(run.id, "w2", LEASE)
    assert claim is not None and claim.decision is not None
    assert claim.decision != APPROVE  # stored sealed
    assert sealed.decisions.opened(claim.decision) == APPROVE
    unkeyed = RunStore(engine, cipher=StateCipher(Fernet.generate_key().decode()))
    with pytest.raises(StateError):
        unkeyed.decisions.opened(claim.decision)


def test_a_call_starts_with_the_events_before_it(repo: RunStore, clock: FakeClock) -> None:
    run, _ = repo.runs.create("mailer", "x")
    assert repo.transitions.claim(run.id, "w1", LEASE) is not None
    read = _read("r1", "found", clock)
    clock.advance(seconds=1)
    prior = Prior([("llm", {"n": 1}), ("tool", {"n": 2})], [read], (1, Usage(5, 2)))
    entry, fresh = repo.ledger.start_call(
        run.id, "c1", "send_email", "write", {"to": "a"}, owner="w1", prior=prior
    )
    assert fresh and entry.status is CallStatus.STARTED
    assert [e.kind for e in repo.events.read(run.id)] == ["llm", "tool"]
    # in the order the calls started, whatever numbers their shared statement gave them
    assert [(e.call_id, e.status) for e in repo.ledger.entries(run.id)] == [
        ("r1", CallStatus.SUCCEEDED),
        ("c1", CallStatus.STARTED),
    ]
    assert repo.runs.require(run.id).usage == Usage(5, 2)


def test_a_call_started_after_the_lease_was_lost_writes_nothing(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    assert repo.transitions.claim(run.id, "w1", LEASE) is not None
    with pytest.raises(LeaseLostError):
        repo.ledger.start_call(
            run.id, "c1", "send_email", "write", {}, owner="w2", prior=Prior([("llm", {})])
        )
    assert repo.events.read(run.id) == [] and repo.ledger.entries(run.id) == []


def test_a_call_in_the_ledger_already_still_gets_the_events_before_it(repo: RunStore) -> None:
    """A redone segment reaches a call its predecessor started: the ledger's record is
    returned as it is, and the new segment's events are written all the same."""
    run, _ = repo.runs.create("mailer", "x")
    assert repo.transitions.claim(run.id, "w1", LEASE) is not None
    first, _ = repo.ledger.start_call(run.id, "c1", "send_email", "write", {"to": "a"}, owner="w1")
    assert repo.transitions.claim(run.id, "w2", LEASE, take_over="w1") is not None
    entry, fresh = repo.ledger.start_call(
        run.id, "c1", "send_email", "write", {"to": "b"}, owner="w2", prior=Prior([("llm", {})])
    )
    assert not fresh and entry == first and entry.started_by == "w1"
    assert [e.kind for e in repo.events.read(run.id)] == ["llm"]
    assert len(repo.ledger.entries(run.id)) == 1


@pytest.fixture
def pg_repo(postgres_url: str) -> Iterator[RunStore]:
    engine = make_engine(postgres_url)
    yield RunStore(engine)
    engine.dispose()


def test_a_claim_finds_its_run_by_primary_key_however_many_are_queued(
    pg_repo: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not by scanning the partial index of queued runs (PostgreSQL chose that plan on a
    table it had no statistics of, and each claim then read every queued run's entry)."""
    repo = pg_repo
    runs = [repo.runs.create("mailer", "x")[0] for _ in range(300)]
    with sent_to_postgres(monkeypatch) as sent:
        assert repo.transitions.claim(runs[150].id, "w1", LEASE) is not None
    ((statement, params),) = sent
    with repo.engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        plan = "\n".join(row[0] for row in driver.execute("EXPLAIN " + statement, params))
    assert "pk_agent_runs" in plan and "ix_agent_runs_queued" not in plan, plan


def test_a_held_connection_is_reused_and_replaced_when_it_fails(pg_repo: RunStore) -> None:
    repo, engine = pg_repo, pg_repo.engine
    repo.hold_connections()
    run, _ = repo.runs.create("mailer", "x")

    def backend() -> int:
        with repo.connections.one() as conn:
            return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())

    first = backend()
    assert repo.runs.get(run.id) is not None and backend() == first  # one connection throughout
    with engine.connect() as admin:  # the server drops it, as a restart would
        admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        admin.commit()
    # the read fails on the dead connection and is retried on a fresh one
    assert repo.runs.get(run.id) is not None
    assert backend() != first
    with engine.connect() as admin:
        admin.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": backend()})
        admin.commit()
    with pytest.raises(OperationalError):  # not a unit the store retries: it fails once
        backend()
    assert backend() != first  # and the next statement has a fresh connection


@pytest.mark.parametrize("held", [True, False], ids=["held", "pooled"])
def test_a_claim_sent_through_the_driver_fails_as_sqlalchemy_and_drops_its_connection(
    pg_repo: RunStore, held: bool
) -> None:
    """The claim skips SQLAlchemy's execution path. When the server drops every
    connection (a restart), it must still raise SQLAlchemy's OperationalError (the
    worker retries on it) once, and then claim on a fresh connection: neither the one
    it held nor the others idle in the pool are used again, as SQLAlchemy would have
    it. (Here the store does not retry it: ``RetryPolicy(seconds=0)``.)"""
    engine = pg_repo.engine
    repo = RunStore(engine, retry=RetryPolicy(seconds=0))
    if held:
        repo.hold_connections()
    first, second = repo.runs.create("mailer", "x")[0], repo.runs.create("mailer", "y")[0]
    assert repo.transitions.claim(first.id, "w1", LEASE) is not None
    leases = repo.connections.engine_for(durable=False)  # the claim's engine
    assert leases is not None
    with leases.connect(), leases.connect():
        pass  # two more connections now idle in its pool

    def backend() -> int:
        with repo.connections.one(durable=False) as conn:
            return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())

    with engine.connect() as admin:
        dropped = set(
            admin.execute(
                text(
                    "SELECT pid FROM pg_stat_activity, pg_terminate_backend(pid)"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalars()
        )
    assert len(dropped) >= 3
    with pytest.raises(OperationalError) as failed:
        repo.transitions.claim(second.id, "w1", LEASE)
    assert isinstance(failed.value.orig, psycopg.OperationalError)
    assert (
        repo.transitions.claim(second.id, "w1", LEASE) is not None
    )  # still queued; a fresh connection
    assert backend() not in dropped


def test_events_for_a_lease_are_written_only_while_it_is_held(repo: RunStore) -> None:
    run, _ = repo.runs.create("mailer", "x")
    repo.transitions.claim(run.id, "w1", LEASE)
    llm: Event = ("llm", {})
    assert repo.events.append_events(run.id, [llm], owner="w1") == [1]
    with pytest.raises(LeaseLostError):
        repo.events.append_events(run.id, [llm], owner="w2")
    assert [e.seq for e in repo.events.read(run.id)] == [1]
    with pytest.raises(UnknownRunError):
        repo.events.append_events(str(uuid.uuid4()), [llm], owner="w1")


@pytest.mark.postgres
def test_postgres_connections_time_out_and_keep_alive(postgres_url: str) -> None:
    """A hung socket must not stop a process's lease renewals for hours: connections
    carry a connect timeout, TCP keepalives and a TCP user timeout, unless the URL
    says otherwise."""
    from airlock.persistence.db import make_engine

    for url, idle in ((postgres_url, "20"), (f"{postgres_url}?keepalives_idle=7", "7")):
        engine = make_engine(url)
        repo = RunStore(engine)
        for sibling in (engine, *(repo.connections.engine_for(durable=d) for d in (True, False))):
            with sibling.connect() as conn:
                params = conn.connection.driver_connection.info.get_parameters()  # type: ignore[union-attr]
            assert params["keepalives"] == "1" and params["keepalives_idle"] == idle
            assert (params["connect_timeout"], params["tcp_user_timeout"]) == ("10", "60000")
        engine.dispose()
