"""A wake-up's publish, as the API and the workers send it (``airlock.workers.tasks.publisher``:
``send_task`` given a producer each thread keeps) against plain ``send_task`` (the
baseline: what ``apply_async`` calls), on the local Redis, measured in the same run.

    .venv/bin/python -m bench.publish [--n 300]

Each is timed back to back (warm) and with 20 ms idle before each publish (cold: how
an approval's publish finds the API, idle between requests). Prints medians and the
ratios, and appends them, with the command, to bench/results/publish.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from airlock.workers.service.settings import Settings
from airlock.workers.tasks.broker import QUEUE, RUN_SEGMENT, make_app
from airlock.workers.tasks.publisher import Publisher
from bench.common import REDIS, progress, record


def timed(publish: Callable[[], object], n: int, idle: float) -> float:
    samples = []
    for _ in range(n):
        if idle:
            time.sleep(idle)
        started = time.perf_counter()
        publish()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="airlock-bench-"))
    celery = make_app(Settings(broker_url=REDIS, home=home))
    publisher = Publisher(celery, QUEUE)
    ways: dict[str, Callable[[], object]] = {
        "send_task": lambda: celery.send_task(RUN_SEGMENT, ("run",)),
        "publisher": lambda: publisher(RUN_SEGMENT, ("run",)),
    }
    result: dict[str, float] = {}
    client = redis.Redis.from_url(REDIS)
    for name, publish in ways.items():
        publish()  # connect
        for label, idle in (("warm", 0.0), ("cold", 0.02)):
            progress(f"{name}, {label}: {args.n} publishes…")
            result[f"{name}_{label}_ms"] = round(timed(publish, args.n, idle) * 1000, 3)
            client.delete(QUEUE)
    for label in ("warm", "cold"):
        result[f"ratio_{label}"] = round(
            result[f"publisher_{label}_ms"] / result[f"send_task_{label}_ms"], 2
        )
    for key, value in result.items():
        print(f"{key:>22}: {value}")
    record("publish", f"publish --n {args.n}", result, n=args.n)


if __name__ == "__main__":
    main()
