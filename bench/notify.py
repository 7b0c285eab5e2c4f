"""Approve → completed with notifications on, against notifications off, in the same run
(issue 28: within 1.2 times). W1 over HTTP as ``bench.approval_path`` drives it, one run at a
time, against a deployment (an API process, ``airlock worker`` with no options) without
``AIRLOCK_NOTIFY_URL``, then two with it, sending every ``run.*`` event to a receiver
(a real HTTP server in its own process, answering 204 at once). Each is measured twice:
approving as soon as a poll shows the run waiting (while its notification is on its
way), and ``--think`` seconds later, as a person would; and at once again with the
notifications on a worker of their own (``airlock worker -Q airlock`` beside ``airlock
worker -Q airlock.notifications``, docs/operations.md). Round after round, so a slow
phase of the host falls on every side alike.

    .venv/bin/python -m bench.notify [--n 60] [--rounds 3] [--think 0.2]

Prints p50/p95 of approve → completed on each side, their ratios to ``off`` and the
approval's parts (``bench.approval_path``); checks that the
receiver got each run's ``run.waiting_for_approval`` and ``run.completed``, and appends
the result, with the command, to bench/results/notify.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx

from airlock.workers.testing import SECRET, Process, free_port, wait_for
from bench.approval_path import PARTS, ms, one_approval
from bench.common import progress, record
from bench.http import Client
from bench.stack import deployment

TYPES = ("run.waiting_for_approval", "run.completed")


class Receiver(BaseHTTPRequestHandler):
    """Counts the notifications by type; ``GET`` answers the counts."""

    protocol_version = "HTTP/1.1"  # keep-alive, as a receiver behind a proxy would
    counts: ClassVar[Counter[str]] = Counter()

    def do_POST(self) -> None:
        event = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.counts[event.get("type", "?")] += 1
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


def received(root: str) -> Counter[str]:
    return Counter(httpx.get(root, timeout=5).json())


def side(n: int, settings: dict[str, str], think: float, notifier: bool) -> list[dict[str, float]]:
    """``n`` approvals, one at a time, on a fresh deployment (after 5 to warm up), each
    sent ``think`` seconds after a poll showed the run waiting: their parts
    (``bench.approval_path.one_approval``). ``notifier``: a worker of its own delivers."""
    deployed = deployment(settings, notifier=notifier)
    with deployed as (stack, base, _worker), Client() as client:

        def pause(run_id: str) -> None:
            time.sleep(think)

        before = pause if think else None
        for _ in range(5):
            one_approval(stack, client, base, before)
        return [one_approval(stack, client, base, before) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60, help="approvals per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--think", type=float, default=0.2, help="an approver's seconds")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    port = free_port()
    root = f"http://127.0.0.1:{port}/"
    receiver = Process(
        "receiver",
        [sys.executable, "-m", "bench.notify", "--serve", str(port)],
        dict(os.environ),
        Path(tempfile.mkdtemp(prefix="airlock-receiver-")) / "receiver.log",
    ).start()
    wait_for("the receiver", lambda: _up(root), timeout=30)
    on = {"AIRLOCK_NOTIFY_URL": f"{root}hooks", "AIRLOCK_NOTIFY_SECRET": SECRET}
    sides = {
        "off": ({}, 0.0, False),
        "on": (on, 0.0, False),
        "on_notifier": (on, 0.0, True),
        f"off_think_{args.think}s": ({}, args.think, False),
        f"on_think_{args.think}s": (on, args.think, False),
    }
    parts: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    try:
        for r in range(args.rounds):
            for name, (settings, think, notifier) in sides.items():
                progress(f"round {r + 1}/{args.rounds}: {name}, {args.n} approvals…")
                parts[name] += side(args.n, settings, think, notifier)
        runs = 3 * args.rounds * (args.n + 5)
        wait_for("every notification", lambda: _all(received(root), runs), timeout=60)
        counts = received(root)
    finally:
        receiver.stop()
    result = summary(parts)
    result["notifications"] = dict(counts)
    report(result)
    command = f"notify --n {args.n} --rounds {args.rounds} --think {args.think}"
    record("notify", command, result, n=args.n)


def _all(counts: Counter[str], runs: int) -> bool:
    return min(counts[t] for t in TYPES) >= runs


def summary(parts: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each side's approve → completed, and each "on" side's ratio to its "off" side
    (the same think time)."""
    totals = {name: ms([p["total"] for p in samples]) for name, samples in parts.items()}
    pairs = {on: _off(on) for on in totals if on.startswith("on")}
    return {
        "approve_to_completed": totals,
        "ratio_p50": {
            on: round(totals[on]["p50_ms"] / totals[off]["p50_ms"], 2) for on, off in pairs.items()
        },
        "ratio_p95": {
            on: round(totals[on]["p95_ms"] / totals[off]["p95_ms"], 2) for on, off in pairs.items()
        },
        "parts_p50_ms": {
            part: {
                name: ms([p[part] for p in samples])["p50_ms"] for name, samples in parts.items()
            }
            for part in PARTS
        },
        "runs_per_side": len(parts["off"]),
    }


def _off(on: str) -> str:
    """The "off" side an "on" side is compared with: the same think time."""
    return "off" if on.startswith("on_notifier") else on.replace("on", "off", 1)


def report(result: dict[str, Any]) -> None:
    for name, at in result["approve_to_completed"].items():
        print(
            f"approve → completed, {name}: p50 {at['p50_ms']:6.2f} ms, p95 {at['p95_ms']:6.2f} ms"
        )
    print(f"against off: p50 {result['ratio_p50']}, p95 {result['ratio_p95']}")
    for part, sides in result["parts_p50_ms"].items():
        print(f"{part:>12} p50: " + "  ".join(f"{n} {v:6.2f}" for n, v in sides.items()) + " ms")
    print(f"notifications received: {result['notifications']}")


def _up(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
