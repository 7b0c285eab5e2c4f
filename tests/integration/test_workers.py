"""Each loop segment is a Celery task in a real worker process, under real faults."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import httpx
import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from airlock.persistence.domain import RunStatus
from airlock.workers.service import ConflictError
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.testing import Process, Stack, airlock_env, free_port, wait_for
from tests.integration.conftest import StackFactory

OPERATOR = Principal.trusted("test")

pytestmark = pytest.mark.integration


def approve(stack: Stack, run_id: str) -> None:
    run = stack.run(run_id)
    assert run.turn_digest is not None
    body = DecisionBody(turn_digest=run.turn_digest, decision="approve", approver="ann")
    stack.service.record_decision(run_id, body, OPERATOR)


def send_key(run_id: str) -> str:
    return f"send_email {run_id}:call_1_0"


def test_w1_waits_without_a_worker_slot_then_completes_once(stack: Stack) -> None:
    stack.worker(concurrency=1)
    run, _ = stack.service.start_run("w1", "mail 42")
    waiting = stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    assert (waiting.iterations, waiting.usage.prompt_tokens, waiting.usage.completion_tokens) == (
        2, 30, 5,
    )  # fmt: skip
    assert waiting.lease_owner is None
    # the only worker slot is free while the run waits: another run goes all the way
    other, _ = stack.service.start_run("w1", "mail 43")
    stack.wait_status(other.id, RunStatus.WAITING_FOR_APPROVAL)
    assert stack.executions()[send_key(run.id)] == 0

    approve(stack, run.id)
    done = stack.wait_status(run.id, RunStatus.COMPLETED)
    assert done.output == "done" and done.termination == "completed"
    assert (done.iterations, done.usage.prompt_tokens, done.usage.completion_tokens) == (3, 60, 9)
    assert stack.executions()[send_key(run.id)] == 1
    assert not done.has_checkpoint
    assert stack.kinds(run.id) == [
        "request", "llm", "tool", "llm", "suspended", "decision", "resumed", "tool", "llm",
        "completed",
    ]  # fmt: skip


def test_twenty_concurrent_approvals_resume_once(stack: Stack) -> None:
    stack.worker()
    run, _ = stack.service.start_run("w1", "mail")
    waiting = stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    assert waiting.turn_digest is not None
    results: Counter[str] = Counter()
    barrier = threading.Barrier(20)

    def decide(i: int) -> None:
        body = DecisionBody(
            turn_digest=waiting.turn_digest or "",
            decision="approve" if i % 3 else "deny",
            approver=f"approver-{i}",
        )
        barrier.wait()
        try:
            results[stack.service.record_decision(run.id, body, OPERATOR).result] += 1
        except ConflictError:
            results["conflict"] += 1

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["recorded"] == 1 and sum(results.values()) == 20
    done = stack.wait_status(run.id, RunStatus.COMPLETED)
    assert stack.kinds(run.id).count("resumed") == 1
    assert stack.kinds(run.id).count("decision") == 1
    approved = stack.executions()[send_key(run.id)]
    assert approved in (0, 1)  # 1 if an approval won, 0 if a denial did
    assert done.status is RunStatus.COMPLETED


def test_killed_worker_mid_segment_is_recovered_by_the_sweeper(stack: Stack) -> None:
    worker = stack.worker()
    stack.beat()
    run, _ = stack.service.start_run("slow_read", "mail")
    lookup_key = f"lookup {run.id}:call_0_0"
    wait_for("the slow lookup to start", lambda: stack.starts()[f"lookup.start {run.id}:call_0_0"])
    worker.kill()
    assert stack.run(run.id).status is RunStatus.RUNNING
    stack.worker()
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    assert stack.executions()[lookup_key] == 1  # the in-doubt read was run again, once
    approve(stack, run.id)
    stack.wait_status(run.id, RunStatus.COMPLETED)
    assert stack.executions()[send_key(run.id)] == 1


POOLS = pytest.mark.parametrize("airlock", [False, True], ids=["prefork", "airlock-worker"])
"""Under ``celery -A airlock.workers worker -c 2`` and ``airlock worker`` as shipped (on Redis,
``-P gevent -c 200``)."""


@POOLS
def test_killed_worker_mid_write_fails_the_run_instead_of_writing_twice(
    stack: Stack, airlock: bool
) -> None:
    worker = stack.worker(airlock=airlock)
    stack.beat()
    run, _ = stack.service.start_run("slow_write", "mail")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, run.id)
    wait_for("the write to start", lambda: stack.starts()[f"send_email.start {run.id}:call_1_0"])
    worker.kill()
    stack.worker(airlock=airlock)
    failed = stack.wait_status(run.id, RunStatus.FAILED, timeout=60)
    assert "started but its outcome was never recorded" in (failed.error or "")
    assert stack.starts()[f"send_email.start {run.id}:call_1_0"] == 1
    assert failed.has_checkpoint  # a failed run keeps its checkpoint for retry


@POOLS
def test_a_worker_killed_right_after_a_policy_approved_write_never_writes_twice(
    stack: Stack, airlock: bool
) -> None:
    """SIGKILL lands after the charge was made, before its result is recorded; the model
    gives every call a fresh id. The redone segment resumes from the written-ahead turn
    (the same call id), finds the charge in doubt and fails the run: it never asks the
    model again and never charges twice."""
    worker = stack.worker(airlock=airlock)
    stack.beat()
    run, _ = stack.service.start_run("policy_charge", "charge 5")
    charged = f"charge {run.id}:"
    wait_for("the charge", lambda: any(k.startswith(charged) for k in stack.executions()))
    worker.kill()
    stack.worker(airlock=airlock)
    failed = stack.wait_status(run.id, RunStatus.FAILED, timeout=60)
    charges = [k for k in stack.executions().elements() if k.startswith(charged)]
    assert len(charges) == 1
    assert "started but its outcome was never recorded" in (failed.error or "")
    assert charges[0].split(":", 1)[1] in (failed.error or "")  # the same call id
    assert stack.kinds(run.id).count("llm") == 1  # the model was not asked again


def test_lost_resume_message_is_re_sent_by_the_sweeper(stack: Stack) -> None:
    worker = stack.worker()
    run, _ = stack.service.start_run("w1", "mail")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    worker.stop()
    approve(stack, run.id)
    broker = redis.Redis.from_url(stack.config["AIRLOCK_BROKER_URL"])
    assert broker.llen("airlock") == 1
    broker.flushdb()
    broker.close()
    stack.worker()
    stack.beat()
    stack.wait_status(run.id, RunStatus.COMPLETED, timeout=60)
    assert stack.executions()[send_key(run.id)] == 1


def test_a_segment_longer_than_the_visibility_timeout_runs_once(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_VISIBILITY_TIMEOUT="1",
        AIRLOCK_LEASE_SECONDS="30",
    )
    stack.worker(concurrency=1)
    run, _ = stack.service.start_run("very_slow_read", "mail")
    wait_for("the slow lookup", lambda: stack.starts()[f"lookup.start {run.id}:call_0_0"])
    # A worker restores unacked messages older than the visibility timeout when it
    # starts polling (and every 100 s after): once the running segment's message is
    # older than that, a new worker redelivers it.
    broker = redis.Redis.from_url(shared_redis)
    wait_for(
        "the message to outlive the visibility timeout", lambda: _unacked_older_than(broker, 1.5)
    )
    broker.close()
    second = stack.worker(concurrency=1)
    wait_for("the redelivery", lambda: "'skipped'" in second.output(), timeout=30)
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL, timeout=30)
    assert stack.starts()[f"lookup.start {run.id}:call_0_0"] == 1
    assert stack.executions()[f"lookup {run.id}:call_0_0"] == 1


def test_by_default_redis_keeps_no_copy_of_a_running_segments_message(stack: Stack) -> None:
    """Without AIRLOCK_VISIBILITY_TIMEOUT kombu keeps no index of unacknowledged
    messages (two Redis transactions per task): the worker holds the message it runs,
    and the sweeper recovers a run whose worker died (the test above this one's)."""
    stack.worker(concurrency=1)
    run, _ = stack.service.start_run("very_slow_read", "mail")
    wait_for("the slow lookup", lambda: stack.starts()[f"lookup.start {run.id}:call_0_0"])
    broker = redis.Redis.from_url(stack.config["AIRLOCK_BROKER_URL"])
    try:
        assert broker.llen("airlock") == 0
        assert broker.exists("unacked", "unacked_index") == 0
    finally:
        broker.close()


@pytest.mark.parametrize(
    ("agent", "status"),
    [("expires_deny", RunStatus.COMPLETED), ("expires_cancel", RunStatus.CANCELLED)],
)
def test_approval_expiry_applies_the_default_action(
    stack: Stack, agent: str, status: RunStatus
) -> None:
    stack.worker()
    stack.beat()
    run, _ = stack.service.start_run(agent, "mail")
    final = stack.wait_status(run.id, status, timeout=30)
    assert "expired" in stack.kinds(run.id)
    assert stack.executions()[send_key(run.id)] == 0
    if status is RunStatus.COMPLETED:
        decision = next(e for e in stack.service.store.events.read(run.id) if e.kind == "decision")
        assert decision.payload["decision"] == "deny"
        assert decision.payload["reason"] == "approval expired"
        assert decision.payload["source"] == "expiry"
    assert final.status is status


def test_the_same_story_on_embedded_defaults(embedded_stack: Stack) -> None:
    stack = embedded_stack
    worker = stack.worker()
    stack.beat()
    run, _ = stack.service.start_run("w1", "mail")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, run.id)
    stack.wait_status(run.id, RunStatus.COMPLETED)
    assert stack.executions()[send_key(run.id)] == 1

    slow, _ = stack.service.start_run("slow_read", "mail")
    wait_for("the slow lookup", lambda: stack.starts()[f"lookup.start {slow.id}:call_0_0"])
    worker.kill()
    stack.worker()
    stack.wait_status(slow.id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    approve(stack, slow.id)
    stack.wait_status(slow.id, RunStatus.COMPLETED, timeout=30)
    assert stack.executions()[send_key(slow.id)] == 1


def _unacked_older_than(broker: redis.Redis, seconds: float) -> bool:
    """kombu keeps each unacked message in the ``unacked_index`` sorted set, scored by
    the time it was delivered."""
    oldest = broker.zrange("unacked_index", 0, 0, withscores=True)
    return bool(oldest) and time.time() - float(oldest[0][1]) > seconds


def test_a_worker_serves_its_segment_durations(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    port = free_port()
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_WORKER_METRICS_PORT=str(port),
    )
    stack.worker()
    run, _ = stack.service.start_run("w1", "mail")
    stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
    approve(stack, run.id)
    stack.wait_status(run.id, RunStatus.COMPLETED)

    def scrape() -> str | None:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        return (
            text if 'airlock_segment_duration_seconds_count{outcome="completed"}' in text else None
        )

    text = wait_for("the completed segment in the metrics", scrape, timeout=10)
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("airlock_segment_duration_seconds_count")
    }
    assert samples == {
        'airlock_segment_duration_seconds_count{outcome="suspended"}': 1.0,
        'airlock_segment_duration_seconds_count{outcome="completed"}': 1.0,
    }


def test_a_threads_pool_is_warned_of_and_prefork_is_not(embedded_stack: Stack) -> None:
    """``-P threads`` stalls about a second between tasks under load (celery#6941):
    the operator is told as the worker starts; the default prefork worker says
    nothing of it."""
    stack = embedded_stack
    prefork = stack.worker()
    argv = [
        sys.executable, "-m", "airlock.workers", "worker", "-P", "threads", "-c", "2",
        "-n", "threads@%h", "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    threads = Process("threads", argv, airlock_env(stack.config, stack.outbox), stack.tmp / "t.log")
    stack.processes.append(threads.start())
    warning = "the threads pool (-P threads) waits about a second between tasks"
    wait_for("the threads pool's warning", lambda: warning in threads.output(), timeout=30)
    assert "ready." in prefork.output()
    assert warning not in prefork.output()


GEVENT = ("-P", "gevent")


def _worker_connections(url: str, application: str) -> int:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            query = text("select count(*) from pg_stat_activity where application_name = :name")
            return int(conn.execute(query, {"name": application}).scalar_one())
    finally:
        engine.dispose()


def test_airlock_worker_keeps_many_segments_waiting_on_their_models_in_one_process(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    """``airlock worker -P gevent``, on Redis: one process (200 greenlets).
    60 runs whose model takes 3 s a call, on leases of 2 s: while all wait on their
    models at once, the worker answers a ping, holds no more database connections than
    its pools allow, and renews every lease; each run reaches its approval with two
    model calls (none lost its lease and ran again); approved, each email is sent once;
    SIGTERM stops the worker warm, after the segments it holds."""
    runs = 60
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_LEASE_SECONDS="2",
        AIRLOCK_DB_POOL_SIZE="3",
        AIRLOCK_TEST_MODEL_SECONDS="3",
        PGAPPNAME="airlock-gevent-worker",
    )
    worker = stack.worker(airlock=True, options=GEVENT)
    assert "200 (gevent)" in worker.output()  # Celery's banner: concurrency 200 (gevent)
    ids = [stack.service.start_run("slow_model", f"mail {i}")[0].id for i in range(runs)]
    wait_for(
        "every run's model call to start",
        lambda: stack.starts()["model.start -"] >= runs,
        timeout=60,
    )
    name = f"w1@{socket.gethostname()}"
    replies = stack.celery.control.ping(destination=[name], timeout=2) or []
    assert replies, "the worker did not answer a ping while its segments wait"
    held = _worker_connections(postgres_url, "airlock-gevent-worker")
    assert 0 < held <= 3 * 3, held  # three pools of at most AIRLOCK_DB_POOL_SIZE each

    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=120)
    assert stack.starts()["model.start -"] == 2 * runs  # no segment ran twice
    assert "lease renewal failed" not in worker.output()
    assert _worker_connections(postgres_url, "airlock-gevent-worker") <= 3 * 3

    for run_id in ids[:-1]:
        approve(stack, run_id)
    for run_id in ids[:-1]:
        stack.wait_status(run_id, RunStatus.COMPLETED, timeout=120)
        assert stack.executions()[send_key(run_id)] == 1

    # warm shutdown: the last run's segment, waiting on its model, ends before the worker
    calls = stack.starts()["model.start -"]  # before the approval: its call may come at once
    approve(stack, ids[-1])
    wait_for("the last model call", lambda: stack.starts()["model.start -"] > calls)
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(60) == 0
    assert stack.run(ids[-1]).status is RunStatus.COMPLETED
    assert stack.executions()[send_key(ids[-1])] == 1


def test_a_segment_that_holds_the_cpu_does_not_cost_the_others_their_leases(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    """``airlock worker -P gevent``: while one segment computes for 6 s without yielding
    (no greenlet runs meanwhile), 20 others wait on their models on leases of 2 s. The
    renewer is an OS thread: no lease lapses, no segment runs twice, the computing run
    completes on its first attempt."""
    runs = 20
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_LEASE_SECONDS="2",
        AIRLOCK_TEST_MODEL_SECONDS="8",
    )
    stack.worker(airlock=True, options=GEVENT)
    ids = [stack.service.start_run("slow_model", f"mail {i}")[0].id for i in range(runs)]
    wait_for("every model call to start", lambda: stack.starts()["model.start -"] >= runs)
    busy, _ = stack.service.start_run("cpu_read", "crunch")
    wait_for("the computation to start", lambda: stack.starts()[f"crunch.start {busy.id}:call_0_0"])

    lapsed: list[str] = []
    while not stack.executions()[f"crunch {busy.id}:call_0_0"]:
        now = datetime.now(UTC)
        for run_id in [*ids, busy.id]:
            run = stack.run(run_id)
            expires = run.lease_expires_at
            if run.status is RunStatus.RUNNING and expires is not None and expires <= now:
                lapsed.append(f"{run_id} lapsed {now - expires} ago")
        time.sleep(0.1)
    assert not lapsed, lapsed[:5]

    assert stack.wait_status(busy.id, RunStatus.COMPLETED).attempts == 1
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
    assert stack.starts()["model.start -"] == 2 * runs  # no segment ran twice


def test_a_gevent_worker_killed_with_segments_waiting_on_models_loses_none(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    """SIGKILL to ``airlock worker`` (its default on Redis: ``-P gevent -c 200``) while
    100 approved runs wait on their models, each after its email was sent: a new worker
    and the sweeper finish every run; no email is sent twice."""
    runs = 100
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_LEASE_SECONDS="3",
        AIRLOCK_SWEEP_INTERVAL="1",
        AIRLOCK_TEST_MODEL_SECONDS="1",
    )
    worker = stack.worker(airlock=True)
    assert "200 (gevent)" in worker.output()  # Celery's banner: the default pool
    stack.beat()
    ids = [stack.service.start_run("slow_model", f"mail {i}")[0].id for i in range(runs)]
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=120)
    assert stack.starts()["model.start -"] == 2 * runs
    (stack.tmp / "model_seconds").write_text("60")  # long enough for the kill
    for run_id in ids:
        approve(stack, run_id)
    wait_for(
        "every approved run to wait on its model, its email sent",
        lambda: stack.starts()["model.start -"] == 3 * runs,
        timeout=120,
    )
    assert sum(stack.executions()[send_key(r)] for r in ids) == runs
    worker.kill()
    (stack.tmp / "model_seconds").unlink()
    stack.worker(airlock=True)
    for run_id in ids:
        assert stack.wait_status(run_id, RunStatus.COMPLETED, timeout=120).output == "done"
        assert stack.executions()[send_key(run_id)] == 1


def _reserved(stack: Stack) -> int:
    replies = stack.celery.control.inspect(timeout=1).reserved() or {}
    return sum(len(tasks) for tasks in replies.values())


def test_a_green_worker_whose_slots_are_all_busy_holds_the_next_task_ready(
    make_stack: StackFactory, postgres_url: str, shared_redis: str
) -> None:
    """Issue 46, intake: ``airlock worker -c 2`` took a backlog about one task per 2 s.
    With every slot busy, Celery's green consumer had no credit left to read the broker
    and looked again only after its 2 s wait; now it holds one task more than its slots,
    which starts as soon as a slot frees."""
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_TEST_MODEL_SECONDS="5",
    )
    stack.worker(airlock=True, options=("-c", "2"))
    ids = [stack.service.start_run("slow_model", f"mail {i}")[0].id for i in range(4)]
    wait_for("both slots' model calls", lambda: stack.starts()["model.start -"] >= 2)
    wait_for("the next task in hand", lambda: _reserved(stack) == 1, timeout=10)
    for run_id in ids:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=120)
