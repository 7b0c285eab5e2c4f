"""Per-segment cost and approve→finished latency through a real worker.

    .venv/bin/python -m bench.segment [--quick]

1. Floor: N no-op task hops (``bench.floor``, one INSERT+COMMIT each) through a real
   worker on Redis + PostgreSQL; time per hop at saturation.
2. Airlock: N one-segment runs through a real Airlock worker on the same broker and
   database, created beforehand (as the floor's rows are not counted, neither is the
   run's insert), then woken back to back: time per segment. Two agents: an instant
   model that answers at once (one model call), and one that calls a no-op read tool
   first (two model calls and one tool call in the segment). Then the same with the
   run's creation counted (``start_run``: insert + request event + publish).
3. Latency: M runs of W1 (read tool, then a gated write); each is approved once it
   waits, and the time from the decision to ``completed`` is measured.

Prints ratios and appends results, with the command, to bench/results/segment.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from sqlalchemy import text

from bench.common import REDIS, progress, record, temporary_database
from persistence.domain import RunStatus
from tests.integration.harness import Stack, celery_worker, wait_for, wait_ready
from workers.decisions import DecisionBody


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, m = (100, 10) if args.quick else (1000, 100)

    tmp = Path(tempfile.mkdtemp(prefix="airlock-bench-"))
    redis.Redis.from_url(REDIS).flushdb()
    with temporary_database() as url:
        config = {
            "AIRLOCK_DATABASE_URL": url,
            "AIRLOCK_BROKER_URL": REDIS,
            "AIRLOCK_AGENTS": "bench.agents:AGENTS",
            "AIRLOCK_HOME": str(tmp / "home"),
        }
        stack = Stack(config, tmp)
        try:
            with stack.service.repo.engine.begin() as conn:
                conn.execute(text("CREATE TABLE bench_floor (id bigserial primary key, n int)"))
            floor = measure_floor(stack, n)
            stack.worker()
            segment = measure_segments(stack, n, "instant")
            with_tool = measure_segments(stack, n, "noop_tool")
            with_create = measure_runs(stack, n)
            latencies = measure_latency(stack, m)
        finally:
            stack.close()
    latencies.sort()
    result = {
        "floor_ms_per_hop": round(floor * 1000, 3),
        "airlock_ms_per_segment": round(segment * 1000, 3),
        "segment_cost_ratio": round(segment / floor, 2),
        "noop_tool_ms_per_segment": round(with_tool * 1000, 3),
        "noop_tool_segment_cost_ratio": round(with_tool / floor, 2),
        "ms_per_run_with_creation": round(with_create * 1000, 3),
        "run_with_creation_cost_ratio": round(with_create / floor, 2),
        "runs_per_s": round(1 / with_create, 1),
        "approve_to_completed_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "approve_to_completed_p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1),
    }
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    record("segment", "segment" + (" --quick" if args.quick else ""), result, n=n, m=m)


def measure_floor(stack: Stack, n: int) -> float:
    progress(f"floor: {n} task hops with one commit each…")
    argv_worker = celery_worker(stack.config, stack.outbox, stack.tmp / "floor.log", "floor")
    argv_worker.argv[argv_worker.argv.index("workers")] = "bench.floor"
    argv_worker.start()
    try:
        wait_ready(argv_worker)
        engine = stack.service.repo.engine

        def count() -> int:
            with engine.connect() as conn:
                return int(conn.execute(text("SELECT count(*) FROM bench_floor")).scalar_one())

        def hops() -> None:
            for i in range(n):
                stack.celery.send_task("bench.floor.v1", (i,))
            wait_for("the floor tasks", lambda: count() >= n, timeout=600, interval=0.01)

        return timed(hops) / n
    finally:
        argv_worker.stop()


def measure_segments(stack: Stack, n: int, agent: str) -> float:
    progress(f"airlock: {n} one-segment runs of {agent}, created beforehand…")
    repo = stack.service.repo
    done = repo.count_by_status()[RunStatus.COMPLETED]
    ids = [repo.create(agent, "go", first_event=("request", {}))[0].id for _ in range(n)]

    def segments() -> None:
        for run_id in ids:
            stack.enqueue(run_id)
        wait_for(
            "the segments",
            lambda: repo.count_by_status()[RunStatus.COMPLETED] >= done + n,
            timeout=600,
            interval=0.01,
        )

    return timed(segments) / n


def measure_runs(stack: Stack, n: int) -> float:
    progress(f"airlock: {n} one-segment runs of instant, creation counted…")
    repo = stack.service.repo
    done = repo.count_by_status()[RunStatus.COMPLETED]

    def runs() -> None:
        for _ in range(n):
            stack.service.start_run("instant", "go")
        wait_for(
            "the runs",
            lambda: repo.count_by_status()[RunStatus.COMPLETED] >= done + n,
            timeout=600,
            interval=0.01,
        )

    return timed(runs) / n


def measure_latency(stack: Stack, m: int) -> list[float]:
    progress(f"latency: {m} W1 runs, approve → completed…")
    out = []
    for _ in range(m):
        run, _ = stack.service.start_run("w1", "mail")
        waiting = stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
        body = DecisionBody(turn_digest=waiting.turn_digest or "", decision="approve")
        start = time.perf_counter()
        stack.service.record_decision(run.id, body, source="bench")
        stack.wait_status(run.id, RunStatus.COMPLETED, interval=0.002)
        out.append(time.perf_counter() - start)
    return out


if __name__ == "__main__":
    main()
