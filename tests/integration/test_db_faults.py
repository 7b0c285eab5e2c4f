"""A real ``airlock worker`` (gevent) whose PostgreSQL connections are killed at every
few statements, before and after they run, while runs go through their whole story:
every run completes, every approved write runs exactly once, none fails in doubt."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from airlock.persistence.domain import RunStatus
from tests.integration.conftest import StackFactory
from tests.integration.test_workers import approve, send_key

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

RUNS = 24


def test_runs_complete_exactly_once_while_connections_are_killed(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, tmp_path: Path
) -> None:
    kills = tmp_path / "kills.log"
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_AGENTS="tests.integration.agents:AGENTS,tests.integration.fault_agents:AGENTS",
        AIRLOCK_TEST_KILL_EVERY="4",
        AIRLOCK_TEST_KILL_LOG=str(kills),
        AIRLOCK_LEASE_SECONDS="20",
    )
    stack.worker(airlock=True)
    stack.beat()
    runs = [stack.service.start_run("w1", f"mail {i}")[0].id for i in range(RUNS)]
    for run_id in runs:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=120)
        approve(stack, run_id)
    for run_id in runs:
        done = stack.wait_status(run_id, RunStatus.COMPLETED, timeout=120)
        assert done.output == "done"
    executions = stack.executions()
    assert {run_id: executions[send_key(run_id)] for run_id in runs} == dict.fromkeys(runs, 1)
    for run_id in runs:
        assert "failed" not in stack.kinds(run_id)
    lines = [line.split("\t") for line in kills.read_text().splitlines()]
    killed = Counter(kind for _, kind in lines)
    assert {where for where, _ in lines} == {"before", "after"}
    assert len(killed) >= 4, killed
    writes = " ".join(killed)
    for table in ("agent_runs", "tool_calls", "run_events"):
        assert table in writes, killed


def test_runs_whose_write_started_then_lost_the_database_past_the_budget_complete_once(
    make_stack: StackFactory, postgres_url: str, shared_redis: str, tmp_path: Path
) -> None:
    """A real worker records an approved write's start, loses the answer, and the database
    is then away longer than ``AIRLOCK_DB_RETRY_SECONDS``: the segment stops, and its
    task's retry (through the broker, with what the stop said) runs the write it had
    started, once. No run fails in doubt although no process died."""
    kills = tmp_path / "kills.log"
    stack = make_stack(
        AIRLOCK_DATABASE_URL=postgres_url,
        AIRLOCK_BROKER_URL=shared_redis,
        AIRLOCK_AGENTS="tests.integration.agents:AGENTS,tests.integration.fault_agents:AGENTS",
        AIRLOCK_TEST_AWAY_AFTER_STARTS="3",
        AIRLOCK_TEST_AWAY_SECONDS="1.5",
        AIRLOCK_DB_RETRY_SECONDS="0.5",
        AIRLOCK_TEST_KILL_LOG=str(kills),
        AIRLOCK_LEASE_SECONDS="30",
    )
    stack.worker(airlock=True)
    runs = [stack.service.start_run("w1", f"mail {i}")[0].id for i in range(4)]
    for run_id in runs:
        stack.wait_status(run_id, RunStatus.WAITING_FOR_APPROVAL, timeout=60)
        approve(stack, run_id)
    for run_id in runs:
        done = stack.wait_status(run_id, RunStatus.COMPLETED, RunStatus.FAILED, timeout=120)
        assert (done.status, done.error) == (RunStatus.COMPLETED, None)
    executions = stack.executions()
    assert {run_id: executions[send_key(run_id)] for run_id in runs} == dict.fromkeys(runs, 1)
    lines = [line.split("\t") for line in kills.read_text().splitlines()]
    after = [kind for where, kind in lines if where == "after"]
    assert len(after) == 3 and all("tool_calls" in kind for kind in after), after
