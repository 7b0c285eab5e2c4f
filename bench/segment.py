"""Per-segment cost and approve→finished latency through a real worker.

    .venv/bin/python -m bench.segment [--quick]

1. Floor: N no-op task hops (``bench.floor``, one INSERT+COMMIT each) through a real
   worker on Redis + PostgreSQL; time per hop at saturation. Its worker consumes a
   queue of its own and runs alongside Airlock's, so the measures can alternate.
2. Airlock: N one-segment runs through a real Airlock worker on the same broker and
   database, created beforehand (as the floor's rows are not counted, neither is the
   run's insert), then woken back to back: time per segment. Two agents: an instant
   model that answers at once (one model call), and one that calls a no-op read tool
   first (two model calls and one tool call in the segment); and, as a row of its
   own, one whose no-op write its policy approves (two model calls, the turn
   checkpointed ahead of the write, the write started and finished in the ledger).
   Then the same with the run's creation counted (``start_run``: insert + request
   event + publish).
3. Latency: M runs of W1 (read tool, then a gated write); each is approved once it
   waits, and the time from the decision to ``completed`` is measured.

After a warm-up of N/10 of each, every measure runs in 5 alternating rounds. Each
ratio is the median of the rounds' ratios (each round's measure against the floor
measured just before it: the host's slow and fast phases cancel out); the ratio of
the medians is recorded too. Prints ratios and appends results, with the command,
to bench/results/segment.jsonl, with where each measure's CPU time went (``cpu_ms``:
per hop or segment, by process, read from /proc).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import redis
from sqlalchemy import text

from airlock.persistence.domain import RunStatus
from airlock.workers.service.decisions import DecisionBody
from airlock.workers.service.principals import Principal
from airlock.workers.testing import Stack, celery_worker, wait_for, wait_ready
from bench.common import REDIS, CpuMeter, Proc, led_by, progress, record, temporary_database

OPERATOR = Principal.trusted("test")


class Timing(NamedTuple):
    seconds: float
    """Per hop or segment."""
    cpu: dict[str, float]
    """CPU seconds per hop or segment, by process group."""


def timed(stack: Stack, fn: Callable[[], None], n: int) -> Timing:
    meter = cpu_meter(stack)
    meter.start()
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    return Timing(seconds / n, {name: cpu / n for name, cpu in meter.stop().items()})


def cpu_meter(stack: Stack) -> CpuMeter:
    """Each worker with its pool (the harness starts each in a process group of its
    own), the PostgreSQL and Redis servers, and this process (the producer)."""
    pid = {p.name: p.proc.pid for p in stack.processes if p.proc is not None}
    floor, airlock = pid["floor"], pid["w1"]

    def command(*names: str) -> Callable[[Proc], bool]:
        return lambda p: p.command.split(" ", 1)[0].rsplit("/", 1)[-1].startswith(names)

    return CpuMeter(
        {
            "floor worker": led_by(floor),
            "airlock worker": led_by(airlock),
            "postgres": command("postgres"),
            "redis": command("redis-server"),
            "producer": lambda p: p.pid == os.getpid(),
        }
    )


ROUNDS = 5


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
            with stack.service.store.engine.begin() as conn:
                conn.execute(text("CREATE TABLE bench_floor (id bigserial primary key, n int)"))
            floor_worker(stack)
            stack.worker()
            progress(f"warming up: {n // 10} of each…")
            for measure in MEASURES.values():
                measure(stack, n // 10)
            rounds: dict[str, list[float]] = {name: [] for name in MEASURES}
            cpu: dict[str, list[dict[str, float]]] = {name: [] for name in MEASURES}
            for r in range(ROUNDS):
                for name, measure in MEASURES.items():
                    progress(f"round {r + 1}/{ROUNDS}: {n} of {name}…")
                    timing = measure(stack, n)
                    rounds[name].append(timing.seconds)
                    cpu[name].append(timing.cpu)
            latencies = measure_latency(stack, m)
        finally:
            stack.close()
    per = {name: statistics.median(times) for name, times in rounds.items()}
    floor = per["floor"]

    def paired(name: str) -> float:
        ratios = [t / f for t, f in zip(rounds[name], rounds["floor"], strict=True)]
        return round(statistics.median(ratios), 2)

    latencies.sort()
    result = {
        "floor_ms_per_hop": round(floor * 1000, 3),
        "airlock_ms_per_segment": round(per["instant"] * 1000, 3),
        "segment_cost_ratio": paired("instant"),
        "noop_tool_ms_per_segment": round(per["noop_tool"] * 1000, 3),
        "noop_tool_segment_cost_ratio": paired("noop_tool"),
        "policy_write_ms_per_segment": round(per["policy_write"] * 1000, 3),
        "policy_write_segment_cost_ratio": paired("policy_write"),
        "ms_per_run_with_creation": round(per["with_creation"] * 1000, 3),
        "run_with_creation_cost_ratio": paired("with_creation"),
        "ratio_of_medians": {
            name: round(per[name] / floor, 2)
            for name in ("instant", "noop_tool", "policy_write", "with_creation")
        },
        "runs_per_s": round(1 / per["with_creation"], 1),
        "approve_to_completed_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "approve_to_completed_p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1),
        "rounds_ms": {k: [round(t * 1000, 3) for t in v] for k, v in rounds.items()},
        # where the time went: CPU ms per hop or segment by process (median of the
        # rounds); all share the machine's cores, so a hop costs their sum
        "cpu_ms": {
            name: {
                group: round(statistics.median(r[group] for r in cpu[name]) * 1000, 3)
                for group in cpu[name][0]
            }
            for name in MEASURES
        },
    }
    for key, value in result.items():
        print(f"{key:>30}: {value}")
    record("segment", "segment" + (" --quick" if args.quick else ""), result, n=n, m=m)


def floor_worker(stack: Stack) -> None:
    """A worker of ``bench.floor`` on its own queue, alongside Airlock's."""
    worker = celery_worker(stack.config, stack.outbox, stack.tmp / "floor.log", "floor")
    worker.argv[worker.argv.index("workers")] = "bench.floor"
    worker.argv += ["-Q", floor_queue()]
    worker.start()
    stack.processes.append(worker)
    wait_ready(worker)


def floor_queue() -> str:
    from bench.floor import QUEUE  # noqa: PLC0415 - importing it builds its Celery app

    return QUEUE


def measure_floor(stack: Stack, n: int) -> Timing:
    """N task hops, one INSERT+COMMIT each, published back to back, until all committed."""
    engine = stack.service.store.engine
    queue = floor_queue()

    def rows_after(mark: int) -> int:
        # an index range scan of this round's rows: the poll costs the same every round
        with engine.connect() as conn:
            query = text("SELECT count(*) FROM bench_floor WHERE id > :mark")
            return int(conn.execute(query, {"mark": mark}).scalar_one())

    with engine.connect() as conn:
        mark = int(conn.execute(text("SELECT coalesce(max(id), 0) FROM bench_floor")).scalar_one())

    def hops() -> None:
        for i in range(n):
            stack.celery.send_task("bench.floor.v1", (i,), queue=queue)
        wait_for("the floor tasks", lambda: rows_after(mark) >= n, timeout=600, interval=0.01)

    return timed(stack, hops, n)


def measure_segments(stack: Stack, n: int, agent: str) -> Timing:
    """N one-segment runs, created beforehand, woken back to back, until all completed."""
    repo = stack.service.store
    ids = [repo.runs.create(agent, "go", first_event=("request", {}))[0].id for _ in range(n)]

    def wake() -> None:
        for run_id in ids:
            stack.enqueue(run_id)

    return _until_completed(stack, n, wake)


def measure_runs(stack: Stack, n: int) -> Timing:
    """N one-segment runs created (insert + request event + publish) and run."""
    return _until_completed(
        stack, n, lambda: [stack.service.start_run("instant", "go") for _ in range(n)]
    )


def _until_completed(stack: Stack, n: int, start: Callable[[], object]) -> Timing:
    engine = stack.service.store.engine
    since = datetime.now(UTC)

    def done() -> bool:
        # the runs finished since this round began, counted on the partial index of
        # finished runs by update time: a range scan of this round's rows, as the
        # floor's poll is (counting queued and running runs instead read the dead
        # entries of every earlier round's runs until autovacuum came by)
        with engine.connect() as conn:
            query = text(
                "SELECT count(*) FROM agent_runs"
                " WHERE status IN ('completed', 'failed', 'cancelled') AND updated_at >= :since"
            )
            return int(conn.execute(query, {"since": since}).scalar_one()) >= n

    def go() -> None:
        start()
        wait_for("the runs", done, timeout=600, interval=0.01)

    return timed(stack, go, n)


MEASURES: dict[str, Callable[[Stack, int], Timing]] = {
    "floor": measure_floor,
    "instant": lambda stack, n: measure_segments(stack, n, "instant"),
    "noop_tool": lambda stack, n: measure_segments(stack, n, "noop_tool"),
    "policy_write": lambda stack, n: measure_segments(stack, n, "policy_write"),
    "with_creation": measure_runs,
}


def measure_latency(stack: Stack, m: int) -> list[float]:
    progress(f"latency: {m} W1 runs, approve → completed…")
    out = []
    for _ in range(m):
        run, _ = stack.service.start_run("w1", "mail")
        waiting = stack.wait_status(run.id, RunStatus.WAITING_FOR_APPROVAL)
        body = DecisionBody(turn_digest=waiting.turn_digest or "", decision="approve")
        start = time.perf_counter()
        stack.service.record_decision(run.id, body, OPERATOR)
        stack.wait_status(run.id, RunStatus.COMPLETED, interval=0.002)
        out.append(time.perf_counter() - start)
    return out


if __name__ == "__main__":
    main()
