"""Approve → completed with notifications on, against notifications off, in the same run
(issue 46: unchanged, within 1.1 times of a fast receiver, whatever the receiver does).
W1 over HTTP as ``bench.approval_path`` drives it, one run at a time, against a
deployment (an API process, ``airlock worker`` with no options) without
``AIRLOCK_NOTIFY_URL``, then one for each receiver (``bench.receiver``, a real HTTP
server in its own process): ``fast`` (204 at once), ``slow`` (204 after 2 s),
``trickle`` (a header byte every 0.5 s, never done within a delivery's deadline). Each
approval is sent as soon as a poll shows the run waiting (while its notification is on
its way). Round after round, so a slow phase of the host falls on every side alike.

    .venv/bin/python -m bench.notify [--n 60] [--rounds 3]

Prints p50/p95 of approve → completed on each side and their ratios to ``fast`` and to
``off``, the outbox's figures on each side as its last run ended (lag p50/p99, failed
attempts, not yet delivered), and appends the result, with the command, to
bench/results/notify.jsonl.
"""

from __future__ import annotations

import argparse
from typing import Any

from airlock.workers.testing import SECRET
from bench import receiver
from bench.approval_path import PARTS, ms, one_approval
from bench.common import outbox_figures, progress, record
from bench.http import Client
from bench.stack import deployment


def side(n: int, settings: dict[str, str]) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """``n`` approvals, one at a time, on a fresh deployment (after 5 to warm up): their
    parts (``bench.approval_path.one_approval``), and the outbox as the last one ended."""
    with deployment(settings) as (stack, base, _worker), Client() as client:
        for _ in range(5):
            one_approval(stack, client, base)
        parts = [one_approval(stack, client, base) for _ in range(n)]
        return parts, outbox_figures(stack.service.store.engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60, help="approvals per side per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    hooks = {mode: receiver.start(mode) for mode in receiver.MODES}
    sides: dict[str, dict[str, str]] = {"off": {}} | {
        mode: {"AIRLOCK_NOTIFY_URL": url, "AIRLOCK_NOTIFY_SECRET": SECRET}
        for mode, (_, url) in hooks.items()
    }
    parts: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    outbox: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    try:
        for r in range(args.rounds):
            for name, settings in sides.items():
                progress(f"round {r + 1}/{args.rounds}: {name}, {args.n} approvals…")
                got, figures = side(args.n, settings)
                parts[name] += got
                outbox[name].append(figures)
    finally:
        for process, _ in hooks.values():
            process.stop()
    result = summary(parts)
    result["outbox_at_last_run"] = outbox
    report(result)
    record("notify", f"notify --n {args.n} --rounds {args.rounds}", result, n=args.n)


def summary(parts: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Each side's approve → completed, and its ratios to the fast receiver's and to
    notifications off."""
    totals = {name: ms([p["total"] for p in samples]) for name, samples in parts.items()}

    def ratios(key: str, to: str) -> dict[str, float]:
        return {name: round(t[key] / totals[to][key], 2) for name, t in totals.items()}

    return {
        "approve_to_completed": totals,
        "ratio_p50_to_fast": ratios("p50_ms", "fast"),
        "ratio_p95_to_fast": ratios("p95_ms", "fast"),
        "ratio_p50_to_off": ratios("p50_ms", "off"),
        "parts_p50_ms": {
            part: {
                name: ms([p[part] for p in samples])["p50_ms"] for name, samples in parts.items()
            }
            for part in PARTS
        },
        "runs_per_side": len(parts["off"]),
    }


def report(result: dict[str, Any]) -> None:
    for name, at in result["approve_to_completed"].items():
        print(
            f"approve → completed, {name}: p50 {at['p50_ms']:6.2f} ms, p95 {at['p95_ms']:6.2f} ms"
        )
    print(f"p50 against the fast receiver: {result['ratio_p50_to_fast']} (target ≤ 1.1)")
    print(f"p95 against the fast receiver: {result['ratio_p95_to_fast']}")
    print(f"p50 against notifications off: {result['ratio_p50_to_off']}")
    for part, sides in result["parts_p50_ms"].items():
        print(f"{part:>12} p50: " + "  ".join(f"{n} {v:6.2f}" for n, v in sides.items()) + " ms")
    for name, rounds in result["outbox_at_last_run"].items():
        if name != "off":
            print(f"outbox as each round's last run ended, {name}: {rounds}")


if __name__ == "__main__":
    main()
