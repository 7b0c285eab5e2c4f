"""Checkpoint round trip (suspend + decision + claim of one run) against a bare
INSERT+COMMIT of a row of the same size, on the same PostgreSQL, in the same run.

    .venv/bin/python -m bench.checkpoint [--quick] [--url postgresql://...]

Prints a table of medians and ratios and appends the results, with the command,
to bench/results/checkpoint.jsonl.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import Engine, text

from airlock.loop import AssistantMessage, SuspendedRunState, ToolCall, Usage, UserMessage
from airlock.loop.state import PendingCall, turn_digest
from airlock.persistence.db import make_engine
from airlock.persistence.store import RunStore
from bench.common import PG, progress, record, temporary_database

SIZES = {"10KB": 10_000, "100KB": 100_000, "1MB": 1_000_000}
LEASE = timedelta(seconds=60)
Row = dict[str, float | str]


def filler(size: int) -> str:
    """Text of ``size`` characters that compresses like prose, not like one repeated byte."""
    words = random.Random(size).choices(WORDS, k=size // 4 + 1)
    return " ".join(words)[:size]


WORDS = [
    "the",
    "customer",
    "asked",
    "about",
    "refund",
    "order",
    "shipping",
    "delayed",
    "invoice",
    "account",
    "email",
    "support",
    "ticket",
    "status",
    "payment",
    "card",
    "address",
    "tracking",
    "number",
    "return",
    "policy",
    "week",
]


def state_of_size(run_id: str, size: int) -> SuspendedRunState:
    call = ToolCall("c1", "send_email", {"to": "a@example.com", "body": "hi"})
    pending = (PendingCall(call.id, call.name, call.arguments, "write"),)
    transcript = (UserMessage(filler(size)), AssistantMessage(None, (call,)))
    return SuspendedRunState(
        run_id=run_id,
        agent_name="mailer",
        agent_fingerprint="f" * 64,
        tool_names=("send_email",),
        transcript=transcript,
        pending_calls=pending,
        iterations=1,
        usage=Usage(10, 1),
        max_iterations=10,
        token_budget=None,
        trace=(),
        turn_digest=turn_digest(run_id, 1, pending),
        sequence=1,
    )


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def timed(fn: Callable[[int], None], i: int) -> float:
    start = time.perf_counter()
    fn(i)
    return time.perf_counter() - start


def measure(engine: Engine, repo: RunStore, label: str, size: int, reps: int) -> Row:
    progress(f"[{label}] preparing {reps} runs…")
    runs = []
    for _ in range(reps):
        run, _ = repo.runs.create("mailer", "x")
        repo.transitions.claim(run.id, "bench", LEASE)
        runs.append((run.id, state_of_size(run.id, size)))
    body = filler(size)

    def bare(_: int) -> None:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO bare (body) VALUES (:b)"), {"b": body})

    def round_trip(i: int) -> None:
        run_id, state = runs[i]
        repo.transitions.suspend(run_id, "bench", state, expires_at=None)
        repo.decisions.record_decision(run_id, state.turn_digest, {"decision": "approve"})
        claimed = repo.transitions.claim(run_id, "bench", LEASE)
        assert claimed is not None
        assert repo.runs.load_state(claimed).turn_digest == state.turn_digest

    bare(0)
    progress(f"[{label}] measuring…")
    # interleaved, so that both see the same machine noise
    base: list[float] = []
    trip: list[float] = []
    for i in range(reps):
        base.append(timed(bare, i))
        trip.append(timed(round_trip, i))
    return {
        "size": label,
        "bare_insert_commit_ms": round(median_ms(base), 3),
        "checkpoint_round_trip_ms": round(median_ms(trip), 3),
        "ratio": round(median_ms(trip) / median_ms(base), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions, for a smoke check")
    parser.add_argument(
        "--url",
        default=PG,
    )
    args = parser.parse_args()
    reps = 20 if args.quick else 200

    with temporary_database(args.url) as url:
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE bare (id bigserial primary key, body text)"))
        repo = RunStore(engine)
        rows = [measure(engine, repo, label, size, reps) for label, size in SIZES.items()]
        engine.dispose()

    first = float(rows[0]["checkpoint_round_trip_ms"])
    print(f"{'size':>6} {'bare ms':>9} {'round trip ms':>14} {'ratio':>6} {'vs 10KB':>8}")
    for row in rows:
        growth = float(row["checkpoint_round_trip_ms"]) / first
        row["growth_vs_10KB"] = round(growth, 2)
        print(
            f"{row['size']:>6} {row['bare_insert_commit_ms']:>9.3f} "
            f"{row['checkpoint_round_trip_ms']:>14.3f} {row['ratio']:>6.2f} {growth:>8.2f}"
        )
    quick = " --quick" if args.quick else ""
    record("checkpoint", f"checkpoint{quick}", rows, repetitions=reps)


if __name__ == "__main__":
    main()
