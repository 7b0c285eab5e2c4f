"""Intake (issue 46): a burst of runs taken by ``airlock worker --concurrency 2`` against
the same burst taken by ``airlock worker`` with no options (on Redis: ``-P gevent -c
200``), in the same run. Each run is the ``instant`` agent (a 0 ms model, no tool): the
worker's intake is all that is measured. Then how long an idle worker takes to stop on
SIGTERM.

    .venv/bin/python -m bench.burst [--runs 100] [--rounds 2] [--no-notify]

Notifications are on, by default: each run's ``run.completed`` goes to a receiver in its
own process (``bench.receiver``, 204 at once).

Target: ``-c 2`` takes the burst at least half as fast as the default (before: about
one task per 2 s with ``-c 2``: Celery's green consumer waited out its 2 s poll after
every slot was busy). Prints runs/s of each and the ratio; appends the result, with the
command, to bench/results/burst.jsonl.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from airlock.persistence.domain import RunStatus
from airlock.workers.testing import SECRET, Process, Stack, airlock_env, wait_for
from bench import receiver
from bench.common import REDIS, progress, record, temporary_database
from bench.stack import bench_config, wait_answers


def burst(runs: int, options: list[str], settings: dict[str, str]) -> dict[str, float]:
    """``runs`` instant runs created at once, taken by ``airlock worker OPTIONS``: runs/s
    from the first create to the last completed; and the idle worker's stop on TERM."""
    redis.Redis.from_url(REDIS).flushdb()
    tmp = Path(tempfile.mkdtemp(prefix="airlock-burst-"))
    with temporary_database() as url:
        stack = Stack(bench_config(url, REDIS, tmp) | settings, tmp)
        argv = [sys.executable, "-m", "workers", "worker", "-n", "burst@%h", *options]
        worker = Process("worker", argv, airlock_env(stack.config, stack.outbox), tmp / "w.log")
        stack.processes.append(worker.start())
        try:
            wait_answers(stack)
            started = time.perf_counter()
            for i in range(runs):
                stack.service.start_run("instant", f"burst {i}")
            wait_for(
                f"{runs} runs completed (logs in {tmp})",
                lambda: (
                    stack.service.store.queries.count_by_status().get(RunStatus.COMPLETED, 0)
                    >= runs
                ),
                timeout=600,
                interval=0.01,
            )
            elapsed = time.perf_counter() - started
            term = time.perf_counter()
            os.killpg(worker.pid, signal.SIGTERM)
            assert worker.proc is not None
            worker.proc.wait(60)
            stopped = time.perf_counter() - term
        finally:
            stack.close()
    return {"runs_per_s": round(runs / elapsed, 2), "idle_stop_s": round(stopped, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--notify", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    hook, url = receiver.start("fast") if args.notify else (None, None)
    settings = {"AIRLOCK_NOTIFY_URL": url, "AIRLOCK_NOTIFY_SECRET": SECRET} if url else {}
    sides: dict[str, list[str]] = {"c2": ["--concurrency", "2"], "default": []}
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    try:
        for r in range(args.rounds):
            for name, options in sides.items():
                progress(f"round {r + 1}/{args.rounds}: airlock worker {' '.join(options)}…")
                samples[name].append(burst(args.runs, options, settings))
    finally:
        if hook is not None:
            hook.stop()
    result: dict[str, Any] = {
        name: {
            "runs_per_s": statistics.median(s["runs_per_s"] for s in got),
            "idle_stop_s_max": max(s["idle_stop_s"] for s in got),
            "rounds": got,
        }
        for name, got in samples.items()
    }
    result["ratio_c2_to_default"] = round(
        result["c2"]["runs_per_s"] / result["default"]["runs_per_s"], 2
    )
    for name in sides:
        print(
            f"{name}: {result[name]['runs_per_s']} runs/s, an idle worker stopped on TERM in"
            f" {result[name]['idle_stop_s_max']} s at most"
        )
    print(f"-c 2 / default: {result['ratio_c2_to_default']}x (target ≥ 0.5x)")
    command = f"burst --runs {args.runs} --rounds {args.rounds}"
    record("burst", command + ("" if args.notify else " --no-notify"), result)


if __name__ == "__main__":
    main()
