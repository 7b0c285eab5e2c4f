"""W1 as users drive it, against the peer in the same run: over HTTP (``POST /v1/runs``,
``GET /v1/runs/{id}`` polled every 2 ms, a Standard Webhooks-signed approval), a real
API process and a real ``airlock worker`` (its default pool) on Redis and PostgreSQL; the peer is
LangGraph with its PostgreSQL checkpointer (``bench/peer``, installed pinned into its
own virtualenv on first use), one process, the same PostgreSQL.

    .venv/bin/python -m bench.approval_path [--n 150] [--runs 600] [--clients 4] [--rounds 3]
        [--no-notify]

Notifications are on, by default (issue 46): every run's events go to a receiver in its
own process (``bench.receiver``, answering 204 at once), delivered by the worker's
dispatcher; ``--no-notify`` measures without.

In each of ``--rounds`` rounds: Airlock runs ``n/rounds`` W1 runs one at a time (the
approval's parts), then ``runs/rounds`` with ``clients`` clients at a time (throughput,
and the CPU each process spends per run), then the peer runs ``n/rounds`` one at a
time (per-run times and its throughput). Interleaving puts a slow phase of a shared
host on both sides alike. The clients use the standard library's ``http.client``
(``bench/http.py``): on two cores the load generator shares the CPU with the server.

Each approval, from sending the webhook to the first ``GET`` that shows
``completed``, is split into:

- ``webhook``: the approval request, answered 202 (signature, decision commit, publish);
- ``to_start``: from the decision to the approved write's ``started`` record (the
  publish, the broker's delivery, the claim, the checkpoint read, the statement that
  writes the events so far with the ``started`` record);
- ``write``: the write itself (``started`` → ``finished`` in the ledger);
- ``to_finish``: from the write's result to the run's final transition (the model's
  answer and the transition's commit);
- ``to_visible``: from that commit to the first poll that shows it.

The points are the ledger's and the run's own timestamps (taken by the worker and
the API on this machine's clock) and the client's. Prints p50/p95/p99, the ratios to
the peer, and appends them, with the command, to bench/results/approval_path.jsonl.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text

from airlock.workers.testing import SECRET, Stack, wait_for
from bench import peer, receiver
from bench.common import CpuMeter, Proc, led_by, progress, record, temporary_database
from bench.http import Client
from bench.stack import deployment, pct, status, throughput, w1_waiting
from bench.trace import VARIABLE, Trace

PARTS = ("webhook", "to_start", "write", "to_finish", "to_visible")
TRACED = ("decided", "published", "received", "task", "claimed")
"""``to_start``'s points, traced by the deployment's processes (bench.trace)."""
STEPS = tuple(f"{a}→{b}" for a, b in itertools.pairwise(("sent", *TRACED, "started")))
TRACE: Trace | None = None


def one_approval(
    stack: Stack, client: Client, base: str, before: Callable[[str], None] | None = None
) -> dict[str, float]:
    """One W1 run, approved as soon as a poll shows it waiting (after ``before(run_id)``,
    if given): its approval's parts, in seconds."""
    created = time.time()
    run_id, path, content, headers = w1_waiting(client, base)
    if before is not None:
        before(run_id)
    sent = time.time()
    answered = client.post(f"{base}{path}", content=content, headers=headers)
    answered_at = time.time()
    assert answered.status_code == 202, answered.text
    wait_for(
        "completed",
        lambda: status(client, base, run_id)["status"] == "completed",
        interval=0.002,
    )
    seen = time.time()
    points = _points(stack, run_id)
    parts = {
        "webhook": answered_at - sent,
        "to_start": points["started"] - points["decided"],
        "write": points["finished"] - points["started"],
        "to_finish": points["completed"] - points["finished"],
        "to_visible": seen - points["completed"],
        "total": seen - sent,
        "create": seen - created,
    }
    traced = TRACE.points(run_id) if TRACE is not None else {}
    if all(p in traced for p in TRACED):  # the deployment traces its points
        at = {"sent": sent, **traced, "started": points["started"]}
        steps = ("sent", *TRACED, "started")
        parts |= {f"{a}→{b}": at[b] - at[a] for a, b in itertools.pairwise(steps)}
    return parts


def _points(stack: Stack, run_id: str) -> dict[str, float]:
    query = text(
        "SELECT d.created_at AS decided, c.started_at AS started,"
        " c.finished_at AS finished, r.updated_at AS completed FROM agent_runs r"
        " JOIN decisions d ON d.run_id = r.id"
        " JOIN tool_calls c ON c.run_id = r.id AND c.tool = 'send_email'"
        " WHERE r.id = :id"
    )
    with stack.service.store.engine.connect() as conn:
        row = conn.execute(query, {"id": run_id}).mappings().one()
    return {k: _epoch(v) for k, v in row.items()}


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def cpu_groups(stack: Stack) -> dict[str, Callable[[Proc], bool]]:
    """Where a throughput round's CPU goes: the API process, the worker (and
    its pool's processes), PostgreSQL, Redis, and this benchmark (the clients)."""
    api, worker = (p.pid for p in stack.processes[:2])
    me = os.getpid()
    return {
        "api": lambda p: p.pid == api,
        "worker": led_by(worker),
        "postgres": lambda p: p.command.startswith("postgres"),
        "redis": lambda p: p.command.startswith("redis-server"),
        "clients": lambda p: p.pid == me,
    }


@dataclass
class Totals:
    samples: list[dict[str, float]] = field(default_factory=list)
    airlock_runs: int = 0
    airlock_wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    peer_approve: list[float] = field(default_factory=list)
    peer_create: list[float] = field(default_factory=list)
    peer_wall: float = 0.0


def measure(
    rounds: int, n: int, clients: int, runs: int, settings: dict[str, str] | None = None
) -> Totals:
    """``rounds`` rounds, each: ``n / rounds`` W1 runs on Airlock one at a time (the
    approval's parts), ``runs / rounds`` with ``clients`` at a time (throughput and
    CPU), then ``n / rounds`` on the peer, one after the other, so that a slow phase of
    the host falls on both sides alike."""
    totals = Totals()
    with (
        deployment(settings) as (stack, base, _worker),
        Client() as client,
        temporary_database() as peer_db,
    ):
        meter = CpuMeter(cpu_groups(stack))
        for _ in range(5):
            one_approval(stack, client, base)  # warm up
        for r in range(rounds):
            progress(f"round {r + 1}/{rounds}: Airlock, {n // rounds} W1 runs one at a time…")
            _tracing(on=True)
            totals.samples += [one_approval(stack, client, base) for _ in range(n // rounds)]
            _tracing(on=False)  # the throughput rounds run as a deployment does
            progress(f"round {r + 1}/{rounds}: Airlock, {runs // rounds} runs, {clients} clients…")
            meter.start()
            rate = throughput(base, clients, runs // rounds)
            done = clients * (runs // rounds // clients)
            totals.airlock_runs += done
            totals.airlock_wall += done / rate
            for group, seconds in meter.stop().items():
                totals.cpu[group] = totals.cpu.get(group, 0.0) + seconds
            progress(f"round {r + 1}/{rounds}: the peer, {n // rounds} W1 runs one at a time…")
            libpq = peer_db.replace("postgresql+psycopg://", "postgresql://")
            peer_run = peer.langgraph_w1(libpq, n // rounds)
            totals.peer_approve += peer_run["approve_to_done"]
            totals.peer_create += peer_run["create_to_done"]
            totals.peer_wall += peer_run["wall"]
    return totals


def _tracing(*, on: bool) -> None:
    if TRACE is not None:
        TRACE.on() if on else TRACE.off()


def ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p95_ms": round(pct(values, 0.95) * 1000, 2),
        "p99_ms": round(pct(values, 0.99) * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=150, help="runs one at a time, each side")
    parser.add_argument("--clients", type=int, default=4, help="Airlock's clients at a time")
    parser.add_argument("--runs", type=int, default=600, help="Airlock's runs for throughput")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--notify", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    global TRACE  # noqa: PLW0603 - the deployment's processes append to it
    trace = Path(tempfile.mkdtemp(prefix="airlock-trace-")) / "trace.txt"
    os.environ[VARIABLE] = str(trace)
    TRACE = Trace(trace)
    hook, url = receiver.start("fast") if args.notify else (None, None)
    settings = {"AIRLOCK_NOTIFY_URL": url, "AIRLOCK_NOTIFY_SECRET": SECRET} if url else None
    try:
        t = measure(args.rounds, args.n, args.clients, args.runs, settings)
    finally:
        if hook is not None:
            hook.stop()
    rate = t.airlock_runs / t.airlock_wall
    peer_rate = len(t.peer_create) / t.peer_wall
    parts = {part: ms([s[part] for s in t.samples]) for part in (*PARTS, "total")}
    steps = {
        step: ms(times) for step in STEPS if (times := [s[step] for s in t.samples if step in s])
    }
    peer_approve = ms(t.peer_approve)
    result: dict[str, Any] = {
        "airlock": {
            "parts": parts,
            "to_start_steps": steps,
            "create_to_completed": ms([s["create"] for s in t.samples]),
            "runs_per_s": round(rate, 1),
            "clients": args.clients,
            "cpu_ms_per_run": {
                group: round(seconds / t.airlock_runs * 1000, 2) for group, seconds in t.cpu.items()
            },
        },
        "peer": {
            "versions": peer.versions(),
            "approve_to_done": peer_approve,
            "create_to_done": ms(t.peer_create),
            "runs_per_s": round(peer_rate, 1),
        },
        "notifications": args.notify,
        "approve_ratio_p50": round(parts["total"]["p50_ms"] / peer_approve["p50_ms"], 2),
        "throughput_ratio": round(rate / peer_rate, 2),
    }
    for part, v in [*parts.items(), ("peer", peer_approve)]:
        print(
            f"{part:>12}: p50 {v['p50_ms']:7.2f}  p95 {v['p95_ms']:7.2f}  p99 {v['p99_ms']:7.2f} ms"
        )
    print("to_start, step by step (bench.trace):")
    for step, at in steps.items():
        print(f"  {step:>20}: p50 {at['p50_ms']:7.2f}  p95 {at['p95_ms']:7.2f} ms")
    print(f"approve → completed, Airlock / peer (p50): {result['approve_ratio_p50']}x")
    print(
        f"throughput: Airlock {rate:.1f} runs/s ({args.clients} clients, airlock worker)"
        f" / peer {peer_rate:.1f} runs/s (one process) = {result['throughput_ratio']}x"
    )
    print(f"Airlock CPU per run (ms): {result['airlock']['cpu_ms_per_run']}")
    command = (
        f"approval_path --n {args.n} --clients {args.clients} --runs {args.runs}"
        f" --rounds {args.rounds}" + ("" if args.notify else " --no-notify")
    )
    record("approval_path", command, result, n=args.n)


if __name__ == "__main__":
    main()
