"""Where an approval's time goes, as users see it: W1 driven over HTTP (``POST /v1/runs``,
``GET /v1/runs/{id}`` polled every 2 ms, a Standard Webhooks-signed approval) against a
real API process and a real ``airlock worker -c 2`` on Redis and PostgreSQL.

    .venv/bin/python -m bench.approval_path [--n 50]

For each approval it splits the time from sending the webhook to the first ``GET``
that shows ``completed`` into:

- ``webhook``: the approval request, answered 202 (signature, decision commit, publish);
- ``to_write``: from the decision's commit to the approved write's ``started`` record
  (broker delivery, the claim, the checkpoint read, the events written before a write);
- ``write``: the write itself (``started`` → ``finished`` in the ledger);
- ``to_finish``: from the write's result to the run's final transition (the model's
  answer and the transition's commit);
- ``to_visible``: from that commit to the first poll that shows it.

The points are the ledger's and the run's own timestamps (taken by the worker and
the API on this machine's clock) and the client's. Prints medians and p95 and appends
them, with the command, to bench/results/approval_path.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import text

from bench import peer
from bench.common import progress, record, temporary_database
from bench.stack import deployment, pct, status, w1_once, w1_waiting
from tests.integration.harness import Stack, wait_for

PARTS = ("webhook", "to_resume", "to_write", "write", "to_finish", "to_visible")


def one_approval(stack: Stack, client: httpx.Client, base: str) -> dict[str, float]:
    created = time.time()
    run_id, path, content, headers = w1_waiting(client, base)
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
    return {
        "webhook": answered_at - sent,
        "to_resume": points["resumed"] - points["decided"],
        "to_write": points["started"] - points["resumed"],
        "write": points["finished"] - points["started"],
        "to_finish": points["completed"] - points["finished"],
        "to_visible": seen - points["completed"],
        "total": seen - sent,
        "create": seen - created,
    }


def _points(stack: Stack, run_id: str) -> dict[str, float]:
    query = text(
        "SELECT d.created_at AS decided, e.created_at AS resumed, c.started_at AS started,"
        " c.finished_at AS finished, r.updated_at AS completed FROM agent_runs r"
        " JOIN decisions d ON d.run_id = r.id"
        " JOIN run_events e ON e.run_id = r.id AND e.kind = 'resumed'"
        " JOIN tool_calls c ON c.run_id = r.id AND c.tool = 'send_email'"
        " WHERE r.id = :id"
    )
    with stack.service.store.engine.connect() as conn:
        row = conn.execute(query, {"id": run_id}).mappings().one()
    return {k: _epoch(v) for k, v in row.items()}


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def throughput(base: str, clients: int, runs: int) -> float:
    """W1 runs per second, create → completed, with ``clients`` clients at a time, each
    on its own connection driving runs one after another."""
    each = runs // clients
    connections = [httpx.Client() for _ in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda c: [w1_once(c, base) for _ in range(each)], connections))
    elapsed = time.perf_counter() - started
    for c in connections:
        c.close()
    return clients * each / elapsed


def airlock(n: int, clients: int, runs: int) -> tuple[list[dict[str, float]], float]:
    with deployment() as (stack, base, _worker), httpx.Client() as client:
        for _ in range(5):
            one_approval(stack, client, base)  # warm up
        progress(f"Airlock: {n} W1 runs over HTTP, one at a time…")
        samples = [one_approval(stack, client, base) for _ in range(n)]
        progress(f"Airlock: {runs} W1 runs, {clients} clients at a time…")
        rate = throughput(base, clients, runs)
    return samples, rate


def ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values) * 1000, 2),
        "p95_ms": round(pct(values, 0.95) * 1000, 2),
        "p99_ms": round(pct(values, 0.99) * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="runs one at a time, each side")
    parser.add_argument("--clients", type=int, default=4, help="Airlock's clients at a time")
    parser.add_argument("--runs", type=int, default=400, help="Airlock's runs for throughput")
    args = parser.parse_args()
    samples, rate = airlock(args.n, args.clients, args.runs)
    progress(f"the peer (LangGraph + PostgresSaver): {args.n} W1 runs, one at a time…")
    with temporary_database() as url:
        peer_run = peer.langgraph_w1(url.replace("postgresql+psycopg://", "postgresql://"), args.n)
    peer_rate = args.n / peer_run["wall"]
    parts = {part: ms([s[part] for s in samples]) for part in (*PARTS, "total")}
    result: dict[str, Any] = {
        "airlock": {
            "parts": parts,
            "create_to_completed": ms([s["create"] for s in samples]),
            "runs_per_s": round(rate, 1),
            "clients": args.clients,
        },
        "peer": {
            "versions": peer.versions(),
            "approve_to_done": ms(peer_run["approve_to_done"]),
            "create_to_done": ms(peer_run["create_to_done"]),
            "runs_per_s": round(peer_rate, 1),
        },
        "approve_ratio_p50": round(
            parts["total"]["p50_ms"] / ms(peer_run["approve_to_done"])["p50_ms"], 2
        ),
        "throughput_ratio": round(rate / peer_rate, 2),
    }
    for part, v in parts.items():
        print(
            f"{part:>12}: p50 {v['p50_ms']:7.2f}  p95 {v['p95_ms']:7.2f}  p99 {v['p99_ms']:7.2f} ms"
        )
    v = result["peer"]["approve_to_done"]
    print(
        f"{'peer':>12}: p50 {v['p50_ms']:7.2f}  p95 {v['p95_ms']:7.2f}  p99 {v['p99_ms']:7.2f} ms"
    )
    print(f"approve → completed, Airlock / peer (p50): {result['approve_ratio_p50']}x")
    print(
        f"throughput: Airlock {rate:.1f} runs/s ({args.clients} clients, worker -c 2)"
        f" / peer {peer_rate:.1f} runs/s (one process) = {result['throughput_ratio']}x"
    )
    command = f"approval_path --n {args.n} --clients {args.clients} --runs {args.runs}"
    record("approval_path", command, result, n=args.n)


if __name__ == "__main__":
    main()
