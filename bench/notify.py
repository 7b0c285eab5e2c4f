"""Approve → completed with notifications on, against notifications off, in the same run
(issue 28: within 1.2 times). W1 over HTTP as ``bench.approval_path`` drives it, one run at a
time, against a deployment (an API process, ``airlock worker`` with no options) without
``AIRLOCK_NOTIFY_URL``, then one with it, sending every ``run.*`` event to a receiver
(a real HTTP server in its own process, answering 204 at once), round after round so a
slow phase of the host falls on both alike.

    .venv/bin/python -m bench.notify [--n 60] [--rounds 3]

Prints p50/p95 of approve → completed on each side and their ratio, checks that the
receiver got each run's ``run.waiting_for_approval`` and ``run.completed``, and appends
the result, with the command, to bench/results/notify.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx

from bench.approval_path import ms, one_approval
from bench.common import progress, record
from bench.http import Client
from bench.stack import deployment
from workers.testing import SECRET, Process, free_port, wait_for

TYPES = ("run.waiting_for_approval", "run.completed")


class Receiver(BaseHTTPRequestHandler):
    """Counts the notifications by type; ``GET`` answers the counts."""

    counts: ClassVar[Counter[str]] = Counter()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.counts[json.loads(body).get("type", "?")] += 1
        self.send_response(204)
        self.end_headers()

    def do_GET(self) -> None:
        answer = json.dumps(self.counts).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(port: int) -> None:
    ThreadingHTTPServer(("127.0.0.1", port), Receiver).serve_forever()


def received(url: str) -> Counter[str]:
    return Counter(httpx.get(url, timeout=5).json())


def side(n: int, settings: dict[str, str]) -> list[float]:
    """``n`` approvals, one at a time, on a fresh deployment (after 5 to warm up)."""
    with deployment(settings) as (stack, base, _worker), Client() as client:
        for _ in range(5):
            one_approval(stack, client, base)
        return [one_approval(stack, client, base)["total"] for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60, help="approvals per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    port = free_port()
    url = f"http://127.0.0.1:{port}/hooks"
    log = Path("/tmp") / f"airlock-receiver-{port}.log"
    receiver = Process(
        "receiver",
        [sys.executable, "-m", "bench.notify", "--serve", str(port)],
        dict(os.environ),
        log,
    ).start()
    wait_for("the receiver", lambda: _up(url), timeout=30)
    on = {"AIRLOCK_NOTIFY_URL": url, "AIRLOCK_NOTIFY_SECRET": SECRET}
    off_times: list[float] = []
    on_times: list[float] = []
    try:
        for r in range(args.rounds):
            progress(f"round {r + 1}/{args.rounds}: notifications off, {args.n} approvals…")
            off_times += side(args.n, {})
            progress(f"round {r + 1}/{args.rounds}: notifications on, {args.n} approvals…")
            on_times += side(args.n, on)
        runs = args.rounds * (args.n + 5)
        wait_for(
            "every notification", lambda: min(received(url)[t] for t in TYPES) >= runs, timeout=60
        )
        counts = received(url)
    finally:
        receiver.stop()
    off, with_notify = ms(off_times), ms(on_times)
    result = {
        "off": off,
        "on": with_notify,
        "ratio_p50": round(with_notify["p50_ms"] / off["p50_ms"], 2),
        "ratio_p95": round(with_notify["p95_ms"] / off["p95_ms"], 2),
        "notifications": dict(counts),
        "runs_per_side": len(off_times),
        "mean_ms": {
            "off": round(statistics.fmean(off_times) * 1000, 2),
            "on": round(statistics.fmean(on_times) * 1000, 2),
        },
    }
    print(f"approve → completed, notifications off: p50 {off['p50_ms']} ms, p95 {off['p95_ms']} ms")
    print(
        f"approve → completed, notifications on:  p50 {with_notify['p50_ms']} ms,"
        f" p95 {with_notify['p95_ms']} ms"
    )
    print(
        f"on / off: p50 {result['ratio_p50']}x, p95 {result['ratio_p95']}x;"
        f" notifications received: {dict(counts)}"
    )
    record("notify", f"notify --n {args.n} --rounds {args.rounds}", result, n=args.n)


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
