"""Segments run in this process, straight through ``Service.run_segment`` on PostgreSQL:
no Celery, no broker. It isolates the cost of Airlock's own code and statements from
the host's noise in ``bench.segment``, to tell a regression from a slow phase.

    .venv/bin/python -m bench.inprocess [--agent noop_tool] [--n 400] [--rounds 7]

Run it from two checkouts one after the other (or alternately) to compare commits.
Prints the median wall and CPU time per segment and appends them, with the command,
to bench/results/inprocess.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from airlock.workers.service import Outcome, Service
from airlock.workers.service.registry import Registry
from bench.agents import AGENTS
from bench.common import progress, record, temporary_database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="noop_tool")
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    wall: list[float] = []
    cpu: list[float] = []
    with temporary_database() as url:
        repo = RunStore(make_engine(url))
        repo.hold_connections()  # as a worker's segment thread does
        service = Service(store=repo, registry=Registry(AGENTS), enqueue=lambda r, d=None: None)
        for r in range(args.rounds):
            progress(f"round {r + 1}/{args.rounds}: {args.n} {args.agent} segments…")
            ids = [
                repo.runs.create(args.agent, "go", first_event=("request", {}))[0].id
                for _ in range(args.n)
            ]
            started, started_cpu = time.perf_counter(), time.process_time()
            for run_id in ids:
                outcome = service.run_segment(run_id, "bench").outcome
                assert outcome is Outcome.COMPLETED, outcome
            wall.append((time.perf_counter() - started) / args.n)
            cpu.append((time.process_time() - started_cpu) / args.n)
        repo.engine.dispose()
    result = {
        "agent": args.agent,
        "wall_ms_per_segment": round(statistics.median(wall) * 1000, 3),
        "cpu_ms_per_segment": round(statistics.median(cpu) * 1000, 3),
        "rounds_wall_ms": [round(t * 1000, 3) for t in wall],
    }
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    record("inprocess", "inprocess " + " ".join(sys.argv[1:]), result, n=args.n)


if __name__ == "__main__":
    main()
