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
from datetime import UTC, datetime
from typing import Any

import httpx
from sqlalchemy import text

from bench.common import progress, record
from bench.stack import deployment, pct, status, w1_waiting
from tests.integration.harness import Stack, wait_for

PARTS = ("webhook", "to_write", "write", "to_finish", "to_visible")


def one_approval(stack: Stack, client: httpx.Client, base: str) -> dict[str, float]:
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
        "to_write": points["started"] - points["decided"],
        "write": points["finished"] - points["started"],
        "to_finish": points["completed"] - points["finished"],
        "to_visible": seen - points["completed"],
        "total": seen - sent,
    }


def _points(stack: Stack, run_id: str) -> dict[str, float]:
    query = text(
        "SELECT d.created_at AS decided, c.started_at AS started, c.finished_at AS finished,"
        " r.updated_at AS completed FROM agent_runs r"
        " JOIN decisions d ON d.run_id = r.id"
        " JOIN tool_calls c ON c.run_id = r.id AND c.tool = 'send_email'"
        " WHERE r.id = :id"
    )
    with stack.service.store.engine.connect() as conn:
        row = conn.execute(query, {"id": run_id}).mappings().one()
    return {k: _epoch(v) for k, v in row.items()}


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    args = parser.parse_args()
    with deployment() as (stack, base, _worker), httpx.Client() as client:
        for _ in range(5):
            one_approval(stack, client, base)  # warm up
        progress(f"{args.n} W1 runs over HTTP, one at a time…")
        samples = [one_approval(stack, client, base) for _ in range(args.n)]
    result: dict[str, Any] = {
        part: {
            "p50_ms": round(statistics.median(s[part] for s in samples) * 1000, 2),
            "p95_ms": round(pct([s[part] for s in samples], 0.95) * 1000, 2),
        }
        for part in (*PARTS, "total")
    }
    for part, value in result.items():
        print(f"{part:>12}: p50 {value['p50_ms']:7.2f} ms   p95 {value['p95_ms']:7.2f} ms")
    record("approval_path", f"approval_path --n {args.n}", result, n=args.n)


if __name__ == "__main__":
    main()
