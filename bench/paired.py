"""The approval path of this checkout against another one (an older commit, say),
paired: two deployments side by side (API + ``worker -c 2`` each, on their own
PostgreSQL database and Redis db number), W1 approvals alternated one by one, so
that a slow phase of the host falls on both alike. What ``bench.approval_path``
measures, as a ratio of this checkout to the other.

    git worktree add /tmp/before <commit>
    .venv/bin/python -m bench.paired /tmp/before [--n 100] [--throughput 200 --rounds 6]

Both run in this virtualenv (the other checkout's code, this one's packages). Prints
each part's median and the ratio, and appends them, with the command, to
bench/results/paired.jsonl. With ``--throughput RUNS`` it also runs, ``--rounds``
times on each side in turn, RUNS W1 runs with 4 clients at a time (as
``bench.approval_path``), and compares the runs per second and the CPU that each
side's API and worker spent per run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from airlock.workers.testing import (
    ROOT,
    Process,
    Stack,
    airlock_env,
    free_port,
    wait_for,
)
from bench.approval_path import PARTS, one_approval
from bench.common import CpuMeter, led_by, progress, record, redis_url, temporary_database
from bench.http import Client
from bench.stack import airlock_worker, bench_config, throughput, up, wait_answers


@contextmanager
def deployment(root: Path, side: int) -> Iterator[tuple[Stack, str]]:
    """The API and a worker of the checkout at ``root``, on the Redis db number
    ``side`` after the benchmarks' own."""
    broker = redis_url(side)
    redis.Redis.from_url(broker).flushdb()
    tmp = Path(tempfile.mkdtemp(prefix="airlock-paired-"))
    with temporary_database() as url:
        config = bench_config(url, broker, tmp)
        stack = Stack(config, tmp)
        env = airlock_env(config, stack.outbox) | {"PYTHONPATH": str(root)}
        port = free_port()
        api = [sys.executable, "-m", "airlock.workers", "api", "--port", str(port)]
        worker = airlock_worker(f"paired{side}")
        try:
            stack.processes.append(Process("api", api, env, tmp / "api.log", root).start())
            base = f"http://127.0.0.1:{port}"
            wait_for("the API", lambda: up(base), timeout=30)
            stack.processes.append(Process("w1", worker, env, tmp / "w1.log", root).start())
            wait_answers(stack)
            yield stack, base
        finally:
            stack.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--throughput", type=int, default=0, metavar="RUNS")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    other = args.other.resolve()
    revs = {
        name: subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()
        for name, root in (("this", ROOT), ("other", other))
    }  # fmt: skip
    samples: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    with (
        deployment(other, 1) as (other_stack, other_base),
        deployment(ROOT, 2) as (this_stack, this_base),
        Client() as other_client,
        Client() as this_client,
    ):
        sides = [
            ("other", other_stack, other_client, other_base),
            ("this", this_stack, this_client, this_base),
        ]
        for _, stack, client, base in sides:
            for _ in range(5):
                one_approval(stack, client, base)  # warm up
        progress(f"{args.n} approvals on each, alternated…")
        for i in range(args.n):
            for name, stack, client, base in sides if i % 2 else sides[::-1]:
                samples[name].append(one_approval(stack, client, base))
        rates = _throughput(sides, args.throughput, args.rounds) if args.throughput else {}
    result: dict[str, dict[str, float]] = {}
    for part in (*PARTS, "total", "create"):
        this = statistics.median(s[part] for s in samples["this"]) * 1000
        that = statistics.median(s[part] for s in samples["other"]) * 1000
        result[part] = {"this_ms": round(this, 2), "other_ms": round(that, 2)}
        result[part]["ratio"] = round(this / that, 2) if that > 0 else float("nan")
        print(f"{part:>10}: this {this:6.2f}  other {that:6.2f}  ratio {this / that:5.2f}")
    command = f"paired {args.other} --n {args.n}"
    if args.throughput:
        command += f" --throughput {args.throughput} --rounds {args.rounds}"
        for key, (this, that) in rates.items():
            result[key] = {"this": this, "other": that, "ratio": round(this / that, 2)}
            print(f"{key:>18}: this {this:6.2f}  other {that:6.2f}  ratio {this / that:5.2f}")
    record("paired", command, result, n=args.n, revs=revs)


def _throughput(sides: list[Any], runs: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Runs per second (the median of the rounds) and CPU ms per run (all rounds) of
    each side's API and worker, rounds alternated."""
    rates: dict[str, list[float]] = {"this": [], "other": []}
    cpu: dict[str, dict[str, float]] = {"this": {}, "other": {}}
    done: dict[str, int] = {"this": 0, "other": 0}
    for r in range(rounds):
        for name, stack, _, base in sides if r % 2 else sides[::-1]:
            progress(f"throughput round {r + 1}/{rounds}: {name}, {runs} runs, 4 clients…")
            leaders = {p.name: p.pid for p in stack.processes}
            meter = CpuMeter({"api": led_by(leaders["api"]), "worker": led_by(leaders["w1"])})
            meter.start()
            rates[name].append(throughput(base, 4, runs))
            for group, seconds in meter.stop().items():
                cpu[name][group] = cpu[name].get(group, 0.0) + seconds
            done[name] += 4 * (runs // 4)
    out = {"runs_per_s": (statistics.median(rates["this"]), statistics.median(rates["other"]))}
    for group in ("api", "worker"):
        out[f"{group}_cpu_ms_per_run"] = (
            round(cpu["this"][group] / done["this"] * 1000, 2),
            round(cpu["other"][group] / done["other"] * 1000, 2),
        )
    return out


if __name__ == "__main__":
    main()
